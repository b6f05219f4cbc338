# SPDX-License-Identifier: Apache-2.0
"""Reads the coordinator's /api/status (ClusterStatus as JSON) for
deploy/test/compose_e2e.

  cluster_status.py STATUS.json --workers-at-least N   exit 0 when N or more
                                                       workers are connected
  cluster_status.py STATUS.json --done-at-least N      exit 0 when the workers
                                                       finished N tasks or more
  cluster_status.py STATUS.json --busy-worker          print the name of a
                                                       worker running a unit
                                                       (exit 1 if none)
"""
import json
import sys


def field(message, name):
    # Protobuf's JSON uses lowerCamelCase names unless told otherwise.
    parts = name.split("_")
    camel = parts[0] + "".join(p.title() for p in parts[1:])
    return message.get(camel, message.get(name, 0))


def main(argv):
    with open(argv[1]) as f:
        status = json.load(f)
    workers = status.get("workers", [])
    what = argv[2]
    if what == "--workers-at-least":
        return 0 if len(workers) >= int(argv[3]) else 1
    if what == "--done-at-least":
        done = sum(int(field(w, "tasks_completed")) for w in workers)
        return 0 if done >= int(argv[3]) else 1
    if what == "--busy-worker":
        for worker in workers:
            if int(field(worker, "running_tasks")) > 0:
                print(worker["name"])
                return 0
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
