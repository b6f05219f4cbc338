#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replays flash-attention-sized nvcc workloads through the real distcc-cuda
coordinator and workers, with the fake compiler standing in for nvcc: each
unit really touches its (scaled) peak memory and holds it for its (scaled)
wall time. Compares distcc-cuda's memory-aware scheduler (cold, then warm
with the cold run's history) with a static job limit k per node, for every
k from 1 up to the first k that gets a memory kill. Prints a table and, last,
one line of key=value pairs.

Standard library only. Run through bench/scheduler.sh, which builds first.
"""
import argparse
import csv
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
GIB = 1 << 30


def load_profiles(path):
    rows = {}
    with open(path) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            rows[row["unit"]] = (float(row["wall_s"]), int(row["cgroup_peak_mib"]))
    return rows


def flash_attention_units(profiles):
    """96 units: fwd, fwd_split, fwd_split_align and bwd x fp16/bf16 x head
    dims 32..256 x causal, costed from the measured hdim128 bf16 profiles.
    Smaller head dims cost less, larger more (a linear model around 128)."""
    kinds = {
        "fwd": profiles["flash_fwd_hdim128_bf16"],
        "fwd_split": profiles["flash_fwd_split_hdim128_bf16"],
        "fwd_split_align": profiles["flash_fwd_split_hdim128_bf16"],
        "bwd": profiles["flash_bwd_hdim128_bf16"],
    }
    units = []
    for kind, (wall, peak_mib) in kinds.items():
        for dtype in ("fp16", "bf16"):
            for hdim in (32, 64, 96, 128, 192, 256):
                for causal in (False, True):
                    size = hdim / 128.0
                    units.append({
                        "name": f"flash_{kind}_hdim{hdim}_{dtype}{'_causal' if causal else ''}",
                        "wall_s": wall * (0.55 + 0.45 * size) * (1.05 if causal else 1.0),
                        "peak_mib": peak_mib * (0.6 + 0.4 * size),
                    })
    return units


ARCHS = (80, 90, 100, 110, 120)


def five_arch_units(units):
    """The same set for five architectures with --threads 4: four cicc at
    once (4x the memory) and two waves of targets (2x the time). Each target
    costs what the measured one-target unit does."""
    return [dict(u, name=u["name"] + "_x5", wall_s=u["wall_s"] * 2, peak_mib=u["peak_mib"] * 4,
                 target_wall_s=u["wall_s"], target_peak_mib=u["peak_mib"], five=True)
            for u in units]


def write_workload(root, units, fake, time_scale, memory_scale):
    """Writes the sources and compile_commands.json. The fake compiler costs
    each -gencode target as given and multiplies as nvcc --threads does
    (memory x min(threads, targets), time x waves of targets), so a unit the
    coordinator compiles one target at a time costs one target."""
    src = os.path.join(root, "src")
    os.makedirs(src, exist_ok=True)
    # As in flash-attention's tree: the forward kernels (split or not)
    # include the forward launch template, the backward ones the backward.
    for header in ("flash_fwd_launch_template.h", "flash_bwd_launch_template.h"):
        with open(os.path.join(src, header), "w") as f:
            f.write(f"// {header}\n")
    entries = []
    for u in units:
        path = os.path.join(src, u["name"] + ".cu")
        touch = max(1, int(u.get("target_peak_mib", u["peak_mib"]) / memory_scale))
        sleep_ms = max(1, int(u.get("target_wall_s", u["wall_s"]) * 1000 / time_scale))
        template = "bwd" if u["name"].startswith("flash_bwd") else "fwd"
        with open(path, "w") as f:
            f.write(f'#include "flash_{template}_launch_template.h"\n'
                    f"// {u['name']}: FAKE_TARGET_MIB={touch} FAKE_TARGET_MS={sleep_ms}\n")
        args = [fake, "-O3", "-std=c++17"]
        if u.get("five"):
            for arch in ARCHS:
                args += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
            args += ["--threads", "4"]
        else:
            args += ["-gencode", "arch=compute_100,code=sm_100"]
        args += ["-c", path, "-o", os.path.join(root, "obj", u["name"] + ".o")]
        entries.append({"directory": root, "file": path, "arguments": args})
        # What the whole unit really costs (as submitted), and each target.
        targets, threads = (len(ARCHS), 4) if u.get("five") else (1, 1)
        u["real_mib"] = touch * min(threads, targets)
        u["real_s"] = sleep_ms / 1000.0 * -(-targets // threads)
        u["targets"] = [{"real_mib": touch, "real_s": sleep_ms / 1000.0}] * targets
    db = os.path.join(root, "compile_commands.json")
    with open(db, "w") as f:
        json.dump(entries, f)
    return db


def settle(max_wait_s=90):
    """Lets the machine quiet down before a measured run: writes back dirty
    pages, drops clean caches where allowed (root), and waits (bounded) for
    the 1-minute load to fall below 1. Right after a build or the test suite
    the same run took 1.20 of its bound here, and 1.09 a minute later."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass
    deadline = time.time() + max_wait_s
    while os.getloadavg()[0] >= 1.0 and time.time() < deadline:
        time.sleep(2)


def vmstat_oom_kills():
    with open("/proc/vmstat") as f:
        for line in f:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return 0


class Cluster:
    def __init__(self, bin_dir, fake, root, nodes, slots, cap_bytes, admission, default_mem,
                 mechanism, worker_args=(), memory_scale=1, time_scale=1, coordinator_args=()):
        self.procs = []
        self.logs = []
        state = os.path.join(root, "state")
        log = open(os.path.join(root, "coordinator.log"), "w")
        self.coordinator = subprocess.Popen(
            [os.path.join(bin_dir, "distcc-cuda-coordinator"), "--listen", "127.0.0.1:0",
             "--state-dir", state, "--admission", admission,
             "--default-unit-memory", str(default_mem), "--default-unit-seconds", "2",
             # Its measured profiles of real units, scaled as the workload is.
             "--prior-memory-scale", str(1 / memory_scale),
             "--prior-time-scale", str(1 / time_scale), *coordinator_args],
            stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(self.coordinator)
        self.address = wait_for(os.path.join(root, "coordinator.log"),
                                r"listening on (\S+)", 20)
        for n in range(nodes):
            path = os.path.join(root, f"node{n}.log")
            self.logs.append(path)
            cmd = [os.path.join(bin_dir, "distcc-cuda-worker"), "--coordinator", self.address,
                   "--name", f"node{n}", "--slots", str(slots), "--memory-cap", str(cap_bytes),
                   "--nvcc", fake, "--work-dir", os.path.join(root, f"node{n}")]
            if mechanism:
                cmd += ["--memory-mechanism", mechanism]
            cmd += worker_args
            self.procs.append(subprocess.Popen(cmd, stdout=open(path, "w"),
                                               stderr=subprocess.STDOUT))
        for path in self.logs:
            wait_for(path, r"registered", 30)

    def stop(self):
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()

    def node_peaks(self):
        peaks = []
        for path in self.logs:
            with open(path) as f:
                m = re.findall(r"node peak (\d+) of cap (\d+)", f.read())
            if m:
                peaks.append((int(m[-1][0]), int(m[-1][1])))
        return peaks


def wait_for(path, pattern, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                m = re.search(pattern, f.read())
            if m:
                return m.group(1) if m.groups() else m.group(0)
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"'{pattern}' did not appear in {path} within {timeout}s")


def parse_size(text):
    """A size as FormatByteSize writes it: "45 MiB", "2.0 GiB"."""
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": GIB}[unit]


def run_policy(args, label, units, db, root, admission, slots, state_from=None, split="auto"):
    run_root = os.path.join(root, label)
    os.makedirs(run_root)
    if state_from:
        shutil.copytree(os.path.join(state_from, "state"), os.path.join(run_root, "state"))
        # Keep the history, not the results: a warm run must compile again.
        shutil.rmtree(os.path.join(run_root, "state", "results"), ignore_errors=True)
    default_mem = int(args.default_unit_mib * MIB / args.memory_scale)
    cluster = Cluster(args.bin_dir, args.fake, run_root, args.nodes, slots, args.cap_bytes,
                      admission, default_mem, args.mechanism, args.worker_args.split(),
                      args.memory_scale, args.time_scale, args.coordinator_args.split())
    settle()
    ooms_before = vmstat_oom_kills()
    start = time.time()
    out = subprocess.run(
        [os.path.join(args.bin_dir, "distcc-cuda"), "build", db, "--coordinator", cluster.address,
         "--library", "libbench.so", "-o", os.path.join(run_root, "out"), "--nvcc", args.fake,
         "--split-architectures", split],
        capture_output=True, text=True, timeout=3600)
    makespan = time.time() - start
    cluster.stop()
    ooms_total = vmstat_oom_kills() - ooms_before
    text = out.stdout + out.stderr
    with open(os.path.join(run_root, "build.log"), "w") as f:
        f.write(text)
    kills = len(re.findall(r"killed for memory", text))
    # How far each unit's predicted peak was from its measured one, from the
    # unit lines ("peak 45 MiB (predicted 64 MiB, default)"): the median over
    # all units, and how many were predicted from the default.
    errors, from_default = [], 0
    for peak, predicted, source in re.findall(
            r"peak ([\d.]+ \w+) \(predicted ([\d.]+ \w+), ([^)]+)\)", text):
        measured = parse_size(peak)
        if measured > 0:
            errors.append(abs(parse_size(predicted) - measured) / measured)
        from_default += source == "default"
    peaks = cluster.node_peaks()
    peak_ratio = max((p / c for p, c in peaks), default=float("nan"))
    # The makespan is the scheduling part: from submission to the last unit
    # (the summary's "compile" time); scanning, upload and link are the same
    # client work for every policy. A failed build has no summary: its wall.
    m = re.search(r"compile ([\d.]+) s, link", text)
    if m:
        makespan = float(m.group(1))
    return {"label": label, "ok": out.returncode == 0, "makespan": makespan, "memory_kills": kills,
            # Kills the node caps did not account for were the host's.
            "host_ooms": max(0, ooms_total - kills), "peak_ratio": peak_ratio,
            "prediction_error": round(100 * statistics.median(errors)) if errors else None,
            "from_default": from_default}


def lower_bound(units, slots_total, cap_total):
    """The larger of total work over total slots, the longest unit, and the
    memory-time area over the total cap."""
    work = sum(u["real_s"] for u in units)
    area = sum(u["real_s"] * u["real_mib"] * MIB for u in units)
    parts = (work / slots_total, max(u["real_s"] for u in units), area / cap_total)
    return max(parts), parts


def list_schedule(units, nodes, slots, cap_bytes, margin, headroom, overhead_mib=0):
    """The makespan of the coordinator's policy with perfect knowledge and no
    process or network overhead: longest unit first, each reserving its peak
    (plus `overhead_mib`) times 1 + `margin` on the first node whose cap less
    `headroom` has room and a free slot; smaller units fill in behind a unit
    waiting for memory only if they do not delay it (EASY backfilling).
    Separates what packing whole units allows from what the system adds."""
    usable = cap_bytes * (1 - headroom)
    queue = sorted(((u["real_s"], (u["real_mib"] + overhead_mib) * MIB * (1 + margin))
                    for u in units), key=lambda u: -u[0])
    free = [usable] * nodes
    running = [[] for _ in range(nodes)]  # (end, reserved) per node
    now = 0.0

    def head_start(node, need):
        """When the queue's first unit could start on `node`, and what would be left."""
        left = free[node]
        for end, reserved in sorted(running[node]):
            left += reserved
            if left >= need:
                return end, left - need
        return None

    while queue or any(running):
        placed = True
        while placed and queue:
            placed = False
            for i, (wall, need) in enumerate(queue):
                fits = [n for n in range(nodes) if free[n] >= need and len(running[n]) < slots]
                if not fits:
                    continue
                node = fits[0]
                if i > 0:
                    window = head_start(node, queue[0][1])
                    if window and now + wall > window[0] and need > window[1]:
                        continue
                free[node] -= need
                running[node].append((now + wall, need))
                queue.pop(i)
                placed = True
                break
        now = min(end for node in running for end, _ in node)
        for n in range(nodes):
            for task in [t for t in running[n] if t[0] <= now]:
                running[n].remove(task)
                free[n] += task[1]
    return now


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--fake", required=True)
    parser.add_argument("--profiles", required=True)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--slots", type=int, default=16, help="cores per simulated node")
    parser.add_argument("--node-memory-gib", type=float, default=96,
                        help="simulated memory per node")
    parser.add_argument("--time-scale", type=float, default=30, help="real s = measured s / this")
    parser.add_argument("--memory-scale", type=float, default=64,
                        help="real MiB = measured MiB / this")
    parser.add_argument("--default-unit-mib", type=float, default=4096,
                        help="cold-start prediction per compilation, simulated MiB")
    parser.add_argument("--mechanism", default="", help="worker --memory-mechanism")
    parser.add_argument("--worker-args", default="", help="more worker flags, space-separated")
    parser.add_argument("--coordinator-args", default="",
                        help="more coordinator flags, space-separated (e.g. --arrival-grace-ms=0)")
    parser.add_argument("--max-k", type=int, default=16)
    parser.add_argument("--workloads", default="fa96,fa96x5")
    parser.add_argument("--policies", default="",
                        help="run only these, comma-separated (distcc-cold, distcc-warm, "
                             "distcc-cold-whole, distcc-warm-whole, static): a partial table")
    parser.add_argument("--bounds-only", action="store_true",
                        help="print the lower bounds and simulated list schedules, run nothing")
    args = parser.parse_args()
    args.cap_bytes = int(args.node_memory_gib * GIB / args.memory_scale)
    profiles = load_profiles(args.profiles)
    base = flash_attention_units(profiles)
    workloads = {"fa96": base, "fa96x5": five_arch_units(base)}
    root = tempfile.mkdtemp(prefix="distcc-bench-")
    print(f"# {args.nodes} nodes x {args.slots} slots, {args.node_memory_gib:g} GiB each "
          f"(real cap {args.cap_bytes / MIB:.0f} MiB); time /{args.time_scale:g}, "
          f"memory /{args.memory_scale:g}; work in {root}")
    summary = {}
    for name in args.workloads.split(","):
        units = [dict(u) for u in workloads[name]]
        wroot = os.path.join(root, name)
        os.makedirs(wroot)
        db = write_workload(wroot, units, args.fake, args.time_scale, args.memory_scale)
        lb, parts = lower_bound(units, args.nodes * args.slots, args.nodes * args.cap_bytes)
        print(f"\n## {name}: {len(units)} units, lower bound {lb:.1f} s (work/slots {parts[0]:.1f}, "
              f"longest {parts[1]:.1f}, memory-time/cap {parts[2]:.1f})")
        targets = [t for u in units for t in u["targets"]]
        per_target = len(targets) > len(units)
        target_lb = lb
        if per_target:
            # The coordinator may compile each -gencode target as a unit of
            # its own; those units have a lower bound of their own.
            target_lb, tparts = lower_bound(targets, args.nodes * args.slots,
                                            args.nodes * args.cap_bytes)
            print(f"   as {len(targets)} one-target units: lower bound {target_lb:.1f} s "
                  f"(work/slots {tparts[0]:.1f}, longest {tparts[1]:.1f}, "
                  f"memory-time/cap {tparts[2]:.1f})")
        for label, margin, headroom in (("exact peaks, no headroom", 0, 0),
                                        ("peaks +5%, 2% headroom", 0.05, 0.02)):
            sim = list_schedule(units, args.nodes, args.slots, args.cap_bytes, margin, headroom)
            print(f"simulated list schedule ({label}): {sim:.1f} s = {sim / lb:.3f} x lower bound")
            if per_target:
                sim = list_schedule(targets, args.nodes, args.slots, args.cap_bytes, margin,
                                    headroom)
                print(f"  one target per unit: {sim:.1f} s = {sim / lb:.3f} x lower bound, "
                      f"{sim / target_lb:.3f} x the one-target units' bound")
        if args.bounds_only:
            continue
        print(f"{'policy':<22}{'makespan s':>11}{'/ LB':>8}{'mem kills':>11}{'host OOM':>10}"
              f"{'peak/cap':>10}{'pred err':>10}{'default':>9}  result")
        wanted = set(args.policies.split(",")) if args.policies else None

        def want(label):
            return wanted is None or label in wanted

        rows = []
        cold = warm = whole = None
        if want("distcc-cold") or want("distcc-warm"):
            cold = run_policy(args, "distcc-cold", units, db, wroot, "memory", args.slots)
            rows.append(cold)
        if want("distcc-warm"):
            warm = run_policy(args, "distcc-warm", units, db, wroot, "memory", args.slots,
                              state_from=os.path.join(wroot, "distcc-cold"))
            rows.append(warm)
        if per_target and (want("distcc-cold-whole") or want("distcc-warm-whole")):
            # The same, with every unit compiled whole (all its targets in one nvcc).
            cold_whole = run_policy(args, "distcc-cold-whole", units, db, wroot, "memory",
                                    args.slots, split="never")
            rows.append(cold_whole)
            if want("distcc-warm-whole"):
                whole = run_policy(args, "distcc-warm-whole", units, db, wroot, "memory",
                                   args.slots, state_from=os.path.join(wroot, "distcc-cold-whole"),
                                   split="never")
                rows.append(whole)
        best_static = None
        for k in range(1, args.max_k + 1 if want("static") else 1):
            # A static job limit compiles units whole, as ninja -j / MAX_JOBS do.
            r = run_policy(args, f"static-k{k}", units, db, wroot, "static", k, split="never")
            rows.append(r)
            if r["memory_kills"] or r["host_ooms"] or not r["ok"]:
                break
            if best_static is None or r["makespan"] < best_static["makespan"]:
                best_static = r
        for r in rows:
            err = "-" if r["prediction_error"] is None else f"{r['prediction_error']}%"
            print(f"{r['label']:<22}{r['makespan']:>11.1f}{r['makespan'] / lb:>8.2f}"
                  f"{r['memory_kills']:>11}{r['host_ooms']:>10}{r['peak_ratio']:>10.2f}"
                  f"{err:>10}{r['from_default']:>9}  {'built' if r['ok'] else 'FAILED'}")
        summary[name] = (lb, cold, warm, best_static, rows, target_lb, whole)
    if args.bounds_only:
        shutil.rmtree(root, ignore_errors=True)
        return
    fa = summary.get("fa96")
    fa5 = summary.get("fa96x5")
    all_rows = [r for s in summary.values() for r in s[4] if r["label"].startswith("distcc")]
    fields = []
    for name, s in summary.items():
        if s[1]:
            # The cold run's kills and prediction error: what a never-built
            # family costs before the history knows it.
            fields.append(f"{name}_cold_ratio={s[1]['makespan'] / s[0]:.3f}")
            fields.append(f"{name}_cold_kills={s[1]['memory_kills']}")
            fields.append(f"{name}_cold_prediction_error={s[1]['prediction_error']}%")
    if fa and fa[2]:
        fields.append(f"fa96_ratio={fa[2]['makespan'] / fa[0]:.3f}")
    if fa5 and fa5[2]:
        fields.append(f"fa96x5_ratio={fa5[2]['makespan'] / fa5[0]:.3f}")
    if fa5 and fa5[2] and fa5[6]:
        # The same makespan over the bound of the one-target units it ran,
        # and the all-whole run over the bound as submitted.
        fields.append(f"fa96x5_ratio_to_target_lb={fa5[2]['makespan'] / fa5[5]:.3f}")
        fields.append(f"fa96x5_whole_ratio={fa5[6]['makespan'] / fa5[0]:.3f}")
    fields.append(f"oom={sum(r['host_ooms'] for r in all_rows)}")
    peak_over_cap = max((r["peak_ratio"] for r in all_rows), default=float("nan"))
    fields.append(f"peak_over_cap={peak_over_cap:.3f}")
    speedups = [s[3]["makespan"] / s[2]["makespan"] for s in summary.values() if s[3] and s[2]]
    fields.append(f"best_static_speedup={min(speedups):.3f}" if speedups else
                  "best_static_speedup=nan")
    print()
    print(" ".join(fields))


if __name__ == "__main__":
    main()
