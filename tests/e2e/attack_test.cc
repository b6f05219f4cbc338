// SPDX-License-Identifier: Apache-2.0
// The attack battery of the security report, end to end: the real
// coordinator and a real, sandboxed worker as separate processes, the real
// nvcc, and each payload in a build of its own. An attacker is
//   - a client whose build carries the payload (through `distcc-cuda build`,
//     whose own checks and local scan must not run it either),
//   - a client that skips those checks and speaks gRPC itself (the
//     coordinator's checks, and for what they cannot see, the sandbox),
//   - a coordinator that hands a worker a hostile task (the worker's checks),
//   - a worker that reports outputs it did not store.
// After every case, canaries prove that nothing outside the sandbox was
// created (the payloads' files), changed (the stores) or read (secrets of
// the host, in any output or store).
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/stages/build_command.h"
#include "common/base/files.h"
#include "common/nvcc/toolchain.h"
#include "common/process/subprocess.h"
#include "common/store/cas_client.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "coordinator/coordinator.h"
#include "distcc_cuda/v1/build.grpc.pb.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"
#include "tests/support/background_process.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string RandomToken() {
  std::random_device random;
  return absl::StrFormat("SECRET-%08x%08x%08x", random(), random(), random());
}

// Every file below `folder`, as bytes.
std::vector<std::string> FilesBelow(const std::string& folder) {
  std::vector<std::string> contents;
  std::error_code error;
  for (fs::recursive_directory_iterator it(folder, error), end; !error && it != end;
       it.increment(error)) {
    if (!it->is_regular_file()) continue;
    absl::StatusOr<std::string> content = ReadFile(it->path().string());
    if (content.ok()) contents.push_back(*std::move(content));
  }
  return contents;
}

class AttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = testing::RealNvccPath();
    if (nvcc_.empty()) GTEST_SKIP() << "needs the real nvcc at /usr/local/cuda/bin/nvcc";
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the worker sandboxes as user nobody";
    root_ = testing::NewTempDir("attack-");
    proj_ = root_ + "/proj";
    // The host's secrets: one of ours (outside every project), and the
    // system's own.
    token_ = RandomToken();
    ASSERT_TRUE(WriteFileAtomically(root_ + "/host-secret.h", token_ + "\n").ok());
    secrets_ = {token_};
    for (const char* file : {"/etc/hostname", "/etc/shadow"}) {
      absl::StatusOr<std::string> content = ReadFile(file);
      if (content.ok() && content->size() >= 8) {
        secrets_.push_back(content->substr(0, content->find('\n')));
        secret_digests_.push_back(DigestOf(*content));
      }
    }
    secret_digests_.push_back(DigestOf(token_ + "\n"));
    ASSERT_TRUE(
        WriteFileAtomically(proj_ + "/a.cu", "__global__ void k(float* x) { *x = 1; }\n").ok());
    ASSERT_TRUE(WriteFileAtomically(proj_ + "/a.h", "#define A 1\n").ok());
    // A file of options for gcc to read, were a path of its name to start
    // with '@' (the review's bypass).
    ASSERT_TRUE(WriteFileAtomically(
                    proj_ + "/inc/a.rsp",
                    absl::StrCat("inc -wrapper /bin/sh,-c,touch\\ ", Pwned("response-file"), "\n"))
                    .ok());
    // A "compiler" an attacker would like to have run: it leaves a mark.
    ASSERT_TRUE(WriteFileAtomically(root_ + "/evil/cc1plus",
                                    absl::StrCat("#!/bin/sh\ntouch ", Pwned("evil-tool"), "\n"))
                    .ok());
    ASSERT_EQ(chmod((root_ + "/evil/cc1plus").c_str(), 0755), 0);
    ASSERT_TRUE(WriteFileAtomically(root_ + "/evil/gcc", *ReadFile(root_ + "/evil/cc1plus")).ok());
    ASSERT_EQ(chmod((root_ + "/evil/gcc").c_str(), 0755), 0);

    auto coordinator = testing::BackgroundProcess::Start(
        {testing::BinaryPath("distcc-cuda-coordinator"), "--listen", "127.0.0.1:0", "--state-dir",
         root_ + "/coordinator"},
        root_ + "/coordinator.log");
    ASSERT_TRUE(coordinator.ok());
    coordinator_ = std::move(*coordinator);
    absl::StatusOr<std::string> line = coordinator_->WaitForLog("listening on ", absl::Seconds(20));
    ASSERT_TRUE(line.ok()) << line.status();
    address_ = line->substr(line->find("listening on ") + 13);
    auto worker = testing::BackgroundProcess::Start(
        {testing::BinaryPath("distcc-cuda-worker"), "--coordinator", address_, "--name", "attacked",
         "--slots", "1", "--memory-cap", "4GiB", "--nvcc", nvcc_, "--work-dir", root_ + "/worker"},
        root_ + "/worker.log");
    ASSERT_TRUE(worker.ok());
    worker_ = std::move(*worker);
    ASSERT_TRUE(worker_->WaitForLog("registered", absl::Seconds(60)).ok()) << worker_->Log();
    ASSERT_THAT(worker_->Log(), HasSubstr("compiles sandboxed by bubblewrap"));
  }

  // Where payload `name` would leave its mark.
  std::string Pwned(const std::string& name) const { return root_ + "/pwned-" + name; }

  // The canaries, after case `name`: no payload ran (here, on the client, or
  // on the worker: one machine), and no secret reached any output or store.
  void ExpectNothingEscaped(const std::string& name, const std::string& output) {
    for (const std::string& mark :
         {Pwned(name), Pwned("evil-tool"), std::string("/tmp/pwned-") + name}) {
      EXPECT_FALSE(fs::exists(mark)) << name << ": a payload ran and made " << mark;
    }
    for (const std::string& secret : secrets_) {
      EXPECT_THAT(output, Not(HasSubstr(secret))) << name << ": a secret reached the output";
    }
    for (const std::string& store : {root_ + "/coordinator/cas", root_ + "/worker/cas"}) {
      for (const Digest& digest : secret_digests_) {
        std::unique_ptr<CasStore> opened = *CasStore::Open(store);
        EXPECT_FALSE(opened->Contains(digest)) << name << ": a host secret was stored in " << store;
      }
      for (const std::string& content : FilesBelow(store)) {
        for (const std::string& secret : secrets_) {
          EXPECT_THAT(content, Not(HasSubstr(secret))) << name << ": a secret is in " << store;
        }
      }
    }
  }

  // `distcc-cuda build` of a compile_commands.json of one entry: nvcc
  // `arguments` then -c a.cu -o a.o, in the project.
  ProcessResult ClientBuild(const std::string& name, const std::vector<std::string>& arguments,
                            const std::string& source = "a.cu") {
    std::string db = absl::StrCat(R"([{"directory": ")", proj_, R"(", "file": ")", source,
                                  R"(", "arguments": [")", nvcc_, "\"");
    for (const std::string& argument : arguments) {
      std::string escaped;
      for (char c : argument) {
        if (c == '"' || c == '\\') escaped += '\\';
        escaped += c;
      }
      absl::StrAppend(&db, ", \"", escaped, "\"");
    }
    absl::StrAppend(&db, R"(, "-c", ")", source, R"(", "-o", ")", name, R"(.o"]}])");
    std::string path = absl::StrCat(root_, "/plans/", name, ".json");
    EXPECT_TRUE(WriteFileAtomically(path, db).ok());
    return testing::RunToEnd(
        {testing::BinaryPath("distcc-cuda"), "build", path, "--coordinator", address_, "--library",
         "libattack.so", "-o", root_ + "/out-" + name, "--nvcc", nvcc_},
        absl::Minutes(3));
  }

  // What a client that skips distcc-cuda's checks gets for `unit` (a unit of
  // the project, its inputs given as path -> content): the RPC's status and
  // the events of the build.
  struct RawBuild {
    absl::Status status;
    std::vector<v1::BuildEvent> events;
    std::string Output() const {
      std::string all = std::string(status.message());
      for (const v1::BuildEvent& event : events) absl::StrAppend(&all, event.DebugString());
      return all;
    }
    const v1::TaskResult* Result() const {
      for (const v1::BuildEvent& event : events) {
        if (event.has_unit_finished()) return &event.unit_finished().result();
      }
      return nullptr;
    }
  };
  RawBuild RawSubmit(v1::CompileUnit unit, const std::map<std::string, std::string>& inputs,
                     const std::string& workspace_root = "") {
    RawBuild raw;
    auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    CasClient cas(v1::ContentStore::NewStub(channel));
    std::vector<BlobSource> blobs;
    for (const auto& [path, content] : inputs) {
      Digest digest = DigestOf(content);
      auto* input = unit.add_inputs();
      input->set_path(path);
      *input->mutable_digest() = ToProto(digest);
      blobs.push_back(BlobSource{digest, "", content});
    }
    absl::StatusOr<int> uploaded = cas.UploadMissing(blobs);
    if (!uploaded.ok()) {
      raw.status = uploaded.status();
      return raw;
    }
    v1::SubmitBuildRequest request;
    request.set_build_name("attack");
    request.set_workspace_root(workspace_root.empty() ? proj_ : workspace_root);
    absl::StatusOr<v1::ToolchainFingerprint> toolchain = ComputeToolchainFingerprint(nvcc_);
    EXPECT_TRUE(toolchain.ok());
    *request.mutable_toolchain() = *toolchain;
    *request.add_units() = unit;
    auto stub = v1::BuildService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(3));
    auto reader = stub->SubmitBuild(&context, request);
    v1::BuildEvent event;
    while (reader->Read(&event)) raw.events.push_back(event);
    grpc::Status finished = reader->Finish();
    raw.status = finished.ok() ? absl::OkStatus()
                               : absl::Status(static_cast<absl::StatusCode>(finished.error_code()),
                                              finished.error_message());
    return raw;
  }

  // A unit of the project: `arguments`, then -c SOURCE -o OUTPUT.
  static v1::CompileUnit Unit(const std::string& name, std::vector<std::string> arguments,
                              const std::string& source = "a.cu",
                              const std::string& output = "a.o") {
    v1::CompileUnit unit;
    unit.set_name(name);
    for (const std::string& argument : arguments) unit.add_arguments(argument);
    for (const std::string& argument : {std::string("-c"), source, std::string("-o"), output}) {
      unit.add_arguments(argument);
    }
    unit.add_output_paths(output);
    return unit;
  }

  std::string nvcc_;
  std::string root_;
  std::string proj_;
  std::string token_;
  std::vector<std::string> secrets_;
  std::vector<Digest> secret_digests_;
  std::string address_;
  std::unique_ptr<testing::BackgroundProcess> coordinator_;
  std::unique_ptr<testing::BackgroundProcess> worker_;
};

// --- through `distcc-cuda build`: refused before anything runs here ------------

struct ClientCase {
  std::string name;
  std::function<std::vector<std::string>(const std::string& root)> arguments;
  std::string message_has;
};

void PrintTo(const ClientCase& c, std::ostream* os) { *os << c.name; }

class ClientAttackTest : public AttackTest, public ::testing::WithParamInterface<ClientCase> {};

TEST_P(ClientAttackTest, IsRefusedNamingTheArgumentAndNothingRuns) {
  const ClientCase& c = GetParam();
  ProcessResult build = ClientBuild(c.name, c.arguments(root_));
  std::string output = build.stdout_text + build.stderr_text;
  EXPECT_EQ(build.exit_code, 2) << output;
  EXPECT_THAT(output, HasSubstr(c.message_has));
  EXPECT_THAT(output, Not(HasSubstr("units     "))) << "a build summary: something compiled";
  ExpectNothingEscaped(c.name, output);
}

std::function<std::vector<std::string>(const std::string&)> Args(
    std::function<std::vector<std::string>(const std::string&)> make) {
  return make;
}

INSTANTIATE_TEST_SUITE_P(
    Payloads, ClientAttackTest,
    ::testing::Values(
        ClientCase{"xcompiler-semicolon",
                   Args([](const std::string& root) -> std::vector<std::string> {
                     return {"-Xcompiler",
                             absl::StrCat("-DX=1;touch ", root, "/pwned-xcompiler-semicolon #")};
                   }),
                   "-Xcompiler piece"},
        ClientCase{
            "xptxas-semicolon", Args([](const std::string& root) -> std::vector<std::string> {
              return {"-Xptxas", absl::StrCat("-v;touch ", root, "/pwned-xptxas-semicolon #")};
            }),
            "-Xptxas piece"},
        ClientCase{"xcompiler-plugin",
                   Args([](const std::string& root) -> std::vector<std::string> {
                     return {"-Xcompiler", "-O2 -fplugin=/x.so"};
                   }),
                   "holds byte 0x20"},
        ClientCase{"xcompiler-b", Args([](const std::string& root) -> std::vector<std::string> {
                     return {"-Xcompiler", absl::StrCat("-O2,-B", root, "/evil")};
                   }),
                   "-B"},
        ClientCase{"ccbin", Args([](const std::string& root) -> std::vector<std::string> {
                     return {"-ccbin", root + "/evil/gcc"};
                   }),
                   "-ccbin is not allowed"},
        ClientCase{"time", Args([](const std::string& root) -> std::vector<std::string> {
                     return {absl::StrCat("--time=", root, "/pwned-time")};
                   }),
                   "--time is not allowed"},
        ClientCase{"run",
                   Args([](const std::string&) -> std::vector<std::string> { return {"--run"}; }),
                   "--run is not allowed"},
        ClientCase{"options-file", Args([](const std::string& root) -> std::vector<std::string> {
                     return {"--options-file", root + "/plans/opts"};
                   }),
                   "--options-file is not allowed"},
        ClientCase{"response-file", Args([](const std::string& root) -> std::vector<std::string> {
                     return {"@" + root + "/plans/opts"};
                   }),
                   "response file"},
        ClientCase{"include-shadow", Args([](const std::string&) -> std::vector<std::string> {
                     return {"-I/etc", "-include", "/etc/shadow"};
                   }),
                   "private folder of this machine"},
        ClientCase{"isystem-response-file",
                   Args([](const std::string&) -> std::vector<std::string> {
                     return {"-isystem", "@inc/a.rsp"};
                   }),
                   "start with '@'"},
        ClientCase{"include-response-file",
                   Args([](const std::string&) -> std::vector<std::string> {
                     return {"-include", "@inc/a.rsp"};
                   }),
                   "start with '@'"},
        ClientCase{"dotdot-include", Args([](const std::string&) -> std::vector<std::string> {
                     return {"-I../../../../../../../../etc"};
                   }),
                   "private folder of this machine"}),
    [](const ::testing::TestParamInfo<ClientCase>& info) {
      std::string name = info.param.name;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// A source of the project that reads a host file: by absolute path, through
// a symlink, or by climbing out with "..": the client's scan finds it and
// refuses to send it.
TEST_F(AttackTest, SourceThatIncludesAHostFileIsRefusedByTheClient) {
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/abs.cu", "#include \"/etc/hostname\"\n").ok());
  ASSERT_TRUE(
      WriteFileAtomically(proj_ + "/climb.cu", "#include \"../../../../../../../etc/shadow\"\n")
          .ok());
  fs::create_symlink("/etc/shadow", proj_ + "/looks_harmless.h");
  ASSERT_TRUE(WriteFileAtomically(proj_ + "/link.cu", "#include \"looks_harmless.h\"\n").ok());
  for (const std::string source : {"abs.cu", "climb.cu", "link.cu"}) {
    ProcessResult build = ClientBuild("source-" + source.substr(0, source.find('.')), {}, source);
    std::string output = build.stdout_text + build.stderr_text;
    EXPECT_EQ(build.exit_code, 2) << source << ": " << output;
    EXPECT_THAT(output, HasSubstr("private folder of this machine")) << source;
    ExpectNothingEscaped("source-" + source, output);
  }
}

// --- straight to the coordinator: its checks refuse the plan ---------------

TEST_F(AttackTest, CoordinatorRefusesWhatTheClientChecksWouldHave) {
  struct Case {
    v1::CompileUnit unit;
    std::string message_has;
  };
  const std::string pwned = Pwned("raw");
  std::vector<Case> cases = {
      {Unit("semicolon", {"-Xcompiler", "-DX=1;touch " + pwned + " #"}), "-Xcompiler piece"},
      {Unit("ptxas", {"-Xptxas", "-v;touch " + pwned}), "-Xptxas piece"},
      {Unit("time", {"--time=" + pwned}), "--time is not allowed"},
      {Unit("ccbin", {"-ccbin", root_ + "/evil/gcc"}), "-ccbin is not allowed"},
      {Unit("shadow", {"-include", "/etc/shadow"}), "/etc/shadow"},
      {Unit("etc", {"-I/etc"}), "-I '/etc'"},
      {Unit("other-home", {"-I/root"}), "outside the workspace"},
      {Unit("dotdot-source", {}, "../../../etc/passwd"), "leaves the sandbox"},
      {Unit("absolute-output", {}, "a.cu", "/tmp/pwned-raw.o"), "leaves the sandbox"},
      // The report's second store attack: an output that names an input.
      {Unit("output-is-input", {}, "a.cu", "a.h"), "also one of its inputs"},
      {Unit("two-actions", {"-ptx"}), "exactly one thing"},
      // gcc reads '@file' arguments as options (-wrapper ...).
      {Unit("isystem-rsp", {"-isystem", "@inc/a.rsp"}), "start with '@'"},
      {Unit("output-rsp", {}, "a.cu", "@inc/o.rsp"), "start with '@'"},
      {Unit("../escape", {}), "not a plain name"},
  };
  for (Case& c : cases) {
    std::string name = c.unit.name();
    RawBuild raw =
        RawSubmit(c.unit, {{"a.cu", *ReadFile(proj_ + "/a.cu")}, {"a.h", "#define A\n"}});
    EXPECT_EQ(raw.status.code(), absl::StatusCode::kInvalidArgument)
        << name << ": " << raw.Output();
    EXPECT_THAT(raw.status.message(), HasSubstr(c.message_has)) << name;
    EXPECT_EQ(raw.Result(), nullptr) << name << ": a unit ran";
    ExpectNothingEscaped("raw", raw.Output());
  }
  // A unit for the host C++ compiler: its own model, the same path rules.
  auto host = [](const std::string& name, std::vector<std::string> arguments) {
    v1::CompileUnit unit = Unit(name, std::move(arguments));
    unit.set_compiler(v1::UNIT_COMPILER_HOST_CXX);
    return unit;
  };
  const std::vector<Case> host_cases = {
      {host("cxx-b", {"-B" + root_ + "/evil"}), "replaces the compiler's own programs"},
      {host("cxx-plugin", {"-fplugin=./a.h"}), "loads code"},
      {host("cxx-specs", {"-specs=a.h"}), "driver's rules"},
      {host("cxx-wrapper", {"-wrapper", "sh,-c,touch," + pwned}), "runs another program"},
      {host("cxx-rsp", {"@a.h"}), "response file"},
      {host("cxx-sysroot", {"--sysroot=/"}), "system root"},
      {host("cxx-wp", {"-Wp,-MD," + pwned}), "unchecked"},
      {host("cxx-shadow", {"-include", "/etc/shadow"}), "/etc/shadow"},
      {host("cxx-nvcc-flag", {"-Xcompiler", "-fPIC"}), "-Xcompiler"},
  };
  for (const Case& c : host_cases) {
    RawBuild raw =
        RawSubmit(c.unit, {{"a.cu", *ReadFile(proj_ + "/a.cu")}, {"a.h", "#define A\n"}});
    EXPECT_EQ(raw.status.code(), absl::StatusCode::kInvalidArgument)
        << c.unit.name() << ": " << raw.Output();
    EXPECT_THAT(raw.status.message(), HasSubstr(c.message_has)) << c.unit.name();
    EXPECT_EQ(raw.Result(), nullptr) << c.unit.name() << ": a unit ran";
    ExpectNothingEscaped("raw", raw.Output());
  }
  // Inputs laid over the toolchain: a root at a system folder, or an input
  // at a system program's path, would be the compile's gcc.
  for (const auto& [root, path] : std::vector<std::pair<std::string, std::string>>{
           {"/usr/bin", "gcc"}, {"/", "usr/bin/gcc"}, {"/usr/local/cuda/bin", "cicc"}}) {
    v1::CompileUnit unit = Unit("shadow-toolchain", {});
    RawBuild raw =
        RawSubmit(unit, {{"a.cu", "int a;\n"}, {path, "#!/bin/sh\ntouch " + pwned}}, root);
    EXPECT_EQ(raw.status.code(), absl::StatusCode::kInvalidArgument) << root << " " << path;
    EXPECT_THAT(raw.status.message(), HasSubstr("toolchain")) << root << " " << path;
    ExpectNothingEscaped("raw", raw.Output());
  }
  // Inputs that climb out or sit in the host's private folders.
  for (const char* path : {"../outside.h", "sub/../../outside.h", "/etc/passwd"}) {
    RawBuild raw = RawSubmit(Unit("bad-input", {}), {{"a.cu", "int a;\n"}, {path, "x"}});
    EXPECT_EQ(raw.status.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(raw.status.message(), HasSubstr("input")) << path;
  }
}

// --- what no check can see: the source's own #includes. The sandbox holds
// only the toolchain and the unit's inputs, at the client's paths. --------

TEST_F(AttackTest, SourcesReadingHostFilesFailInsideTheSandbox) {
  const std::vector<std::pair<std::string, std::string>> sources = {
      {"etc-hostname", "#include \"/etc/hostname\"\n"},
      {"etc-shadow", "#include \"/etc/shadow\"\n"},
      {"host-secret", absl::StrCat("#include \"", root_, "/host-secret.h\"\n")},
      {"climb", "#include \"../../../../../../../../etc/shadow\"\n"},
      {"worker-store", absl::StrCat("#include \"", root_, "/worker/cas/README\"\n")},
  };
  for (const auto& [name, text] : sources) {
    RawBuild raw = RawSubmit(Unit(name, {}), {{"a.cu", text}});
    ASSERT_TRUE(raw.status.ok()) << name << ": " << raw.status;
    const v1::TaskResult* result = raw.Result();
    ASSERT_NE(result, nullptr) << name << ": " << raw.Output();
    EXPECT_EQ(result->outcome(), v1::TASK_COMPLETED) << name;
    EXPECT_NE(result->exit_code(), 0) << name << ": the include was found";
    EXPECT_THAT(result->stderr_text() + result->stdout_text(),
                AnyOf(HasSubstr("No such file or directory"), HasSubstr("cannot open source file")))
        << name;
    ExpectNothingEscaped(name, raw.Output());
  }
  // And the sandbox keeps the client's own paths: an include of the
  // project's header by its absolute client path works.
  RawBuild ok = RawSubmit(Unit("own-absolute-path", {}),
                          {{"a.cu", absl::StrCat("#include \"", proj_, "/a.h\"\n",
                                                 "__global__ void k(int* x) { *x = A; }\n")},
                           {"a.h", "#define A 1\n"}});
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  ASSERT_NE(ok.Result(), nullptr);
  EXPECT_EQ(ok.Result()->exit_code(), 0) << ok.Result()->stderr_text();
}

// A unit whose object overwrites one of its own inputs on the worker leaves
// the worker's stored copy alone, and the next unit compiles what the
// client sent.
TEST_F(AttackTest, NothingACompileWritesReachesTheWorkersStore) {
  const std::string header = "#pragma once\n#define VALUE 7\n";
  const std::string source = "#include \"v.h\"\n__global__ void k(int* x) { *x = VALUE; }\n";
  RawBuild first = RawSubmit(Unit("first", {}), {{"a.cu", source}, {"v.h", header}});
  ASSERT_TRUE(first.status.ok()) << first.status;
  ASSERT_NE(first.Result(), nullptr);
  ASSERT_EQ(first.Result()->exit_code(), 0) << first.Result()->stderr_text();
  std::unique_ptr<CasStore> store = *CasStore::Open(root_ + "/worker/cas");
  ASSERT_TRUE(store->Contains(DigestOf(header)));
  for (const std::string& content : FilesBelow(root_ + "/worker/cas")) {
    EXPECT_THAT(content, Not(HasSubstr("EVIL"))) << "the store changed";
  }
  EXPECT_EQ(*store->Get(DigestOf(header)), header);
  struct stat info;
  ASSERT_EQ(stat(store->PathOf(DigestOf(header)).c_str(), &info), 0);
  EXPECT_EQ(info.st_nlink, 1u) << "a stored blob is hard-linked somewhere";
}

// --- a hostile coordinator: the worker checks every task itself ------------

// Serves a worker one task, then records what it reports.
class HostileCoordinator final : public v1::WorkerService::CallbackService {
 public:
  explicit HostileCoordinator(v1::Task task) : task_(std::move(task)) {}

  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* context,
                                           const v1::RegisterWorkerRequest*,
                                           v1::RegisterWorkerResponse* response) override {
    response->set_worker_id("w-hostile");
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest*,
                                      v1::HeartbeatResponse*) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* LeaseTask(grpc::CallbackServerContext* context,
                                      const v1::LeaseTaskRequest*,
                                      v1::LeaseTaskResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      if (!leased_) *response->mutable_task() = task_;
      leased_ = true;
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* ReportResult(grpc::CallbackServerContext* context,
                                         const v1::ReportResultRequest* request,
                                         v1::ReportResultResponse*) override {
    {
      absl::MutexLock lock(&mu_);
      reported_ = request->result();
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  std::optional<v1::TaskResult> WaitForReport(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::optional<v1::TaskResult>* r) { return r->has_value(); }, &reported_),
        timeout);
    return reported_;
  }

 private:
  v1::Task task_;
  absl::Mutex mu_;
  bool leased_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::TaskResult> reported_ ABSL_GUARDED_BY(mu_);
};

// Serves `task` to a real worker (working in `work_dir`) from a
// HostileCoordinator on loopback; returns what the worker reported, or
// nothing within 30 s.
std::optional<v1::TaskResult> ReportOfTask(const v1::Task& task, const std::string& work_dir) {
  HostileCoordinator service(task);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return std::nullopt;
  worker::WorkerOptions options;
  options.coordinator_address = absl::StrCat("127.0.0.1:", port);
  options.name = "victim";
  options.memory_cap_bytes = int64_t{1} << 30;
  options.nvcc_path = testing::FakeNvccPath();
  options.work_dir = work_dir;
  // The sandbox is not what is under test here (and needs root): the
  // worker's own check must stop the task before anything runs.
  options.sandbox = false;
  absl::StatusOr<std::unique_ptr<worker::Worker>> worker = worker::Worker::Start(options);
  EXPECT_TRUE(worker.ok()) << worker.status();
  if (!worker.ok()) return std::nullopt;
  std::optional<v1::TaskResult> result = service.WaitForReport(absl::Seconds(30));
  worker->reset();
  server->Shutdown();
  return result;
}

TEST(HostileCoordinatorTest, WorkerRejectsHostileTasksBeforeAnythingRuns) {
  std::string root = testing::NewTempDir("hostile-");
  std::string pwned = root + "/pwned";
  struct Case {
    std::vector<std::string> arguments;
    std::vector<std::string> inputs;
    std::string message_has;
    bool host_compiler = false;
  };
  std::vector<Case> cases = {
      {{"-Xcompiler", "-DX=1;touch " + pwned + " #", "-c", "a.cu", "-o", "a.o"}, {"a.cu"}, "';'"},
      {{"--run", "-c", "a.cu", "-o", "a.o"}, {"a.cu"}, "--run"},
      {{"-c", "a.cu", "-o", "a.o"}, {"a.cu", "../../x"}, "input"},
      {{"-c", "a.cu", "-o", "a.cu"}, {"a.cu"}, "also one of its inputs"},
      // The host C++ compiler's units: its own model.
      {{"-B" + root, "-c", "a.cpp", "-o", "a.o"}, {"a.cpp"}, "replaces the compiler's", true},
      {{"-fplugin=./a.cpp", "-c", "a.cpp", "-o", "a.o"}, {"a.cpp"}, "loads code", true},
      {{"-wrapper", "sh,-c,touch," + pwned, "-c", "a.cpp", "-o", "a.o"},
       {"a.cpp"},
       "runs another program",
       true},
      {{"--run", "-c", "a.cpp", "-o", "a.o"}, {"a.cpp"}, "--run", true},
  };
  for (const Case& c : cases) {
    v1::Task task;
    task.set_task_id("t-hostile");
    v1::CompileUnit* unit = task.mutable_unit();
    unit->set_name("hostile");
    if (c.host_compiler) unit->set_compiler(v1::UNIT_COMPILER_HOST_CXX);
    for (const std::string& argument : c.arguments) unit->add_arguments(argument);
    unit->add_output_paths(c.arguments.back());
    for (const std::string& path : c.inputs) {
      auto* input = unit->add_inputs();
      input->set_path(path);
      *input->mutable_digest() = ToProto(DigestOf("int a;\n"));
    }
    std::optional<v1::TaskResult> result = ReportOfTask(task, root + "/worker");
    ASSERT_TRUE(result.has_value()) << absl::StrJoin(c.arguments, " ");
    EXPECT_EQ(result->outcome(), v1::TASK_REJECTED) << result->DebugString();
    EXPECT_THAT(result->error_message(), HasSubstr(c.message_has));
    EXPECT_FALSE(fs::exists(pwned));
  }
}

// A unit whose input tree the worker cannot read (here: a coordinator that
// serves no store) fails to start, saying so; nvcc never runs.
TEST(HostileCoordinatorTest, AUnitWhoseTreeCannotBeReadDoesNotStart) {
  std::string root = testing::NewTempDir("hostile-tree-");
  v1::Task task;
  task.set_task_id("t-tree");
  v1::CompileUnit* unit = task.mutable_unit();
  unit->set_name("tree");
  for (const char* argument : {"-c", "a.cu", "-o", "a.o"}) unit->add_arguments(argument);
  unit->add_output_paths("a.o");
  *unit->mutable_input_root() = ToProto(DigestOf("a folder nobody stored"));
  std::optional<v1::TaskResult> result = ReportOfTask(task, root + "/worker");
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->outcome(), v1::TASK_FAILED_TO_START) << result->DebugString();
  EXPECT_THAT(result->error_message(), HasSubstr("cannot read the unit's input tree"));
}

// --- a compile that rearranges its own tree --------------------------------

// The review's escape: the compile (here a hostile "nvcc", standing for any
// code that gets to run inside the sandbox) replaces its output's folder by
// a link to a root-only folder of the worker, hoping the worker, as root,
// uploads the file it finds there. The worker reads outputs following no
// link.
TEST(PlantedLinkTest, WorkerDoesNotFollowALinkTheCompilePlanted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the sandbox runs as nobody, the worker as root";
  if (access("/usr/bin/bwrap", X_OK) != 0) GTEST_SKIP() << "needs bubblewrap";
  std::string root = testing::NewTempDir("planted-");
  std::string token = RandomToken();
  ASSERT_TRUE(WriteFileAtomically(root + "/secret/token.txt", token).ok());
  ASSERT_EQ(chmod((root + "/secret").c_str(), 0700), 0);
  ASSERT_EQ(chmod((root + "/secret/token.txt").c_str(), 0600), 0);
  std::string nvcc = testing::FakeNvccWithRelease(root + "/toolkit", "13.0");
  ASSERT_TRUE(
      WriteFileAtomically(
          nvcc, absl::StrCat("#!/bin/sh\n"
                             "case \"$*\" in *--version*) exec \"$(dirname \"$0\")/fake_nvcc\" "
                             "\"$@\";; esac\n"
                             "echo planted > sub/token.txt\n"
                             "mv sub sub.real && ln -s ",
                             root, "/secret sub\nexit 0\n"))
          .ok());
  ASSERT_EQ(chmod(nvcc.c_str(), 0755), 0);

  coordinator::CoordinatorOptions options;
  options.state_dir = root + "/coordinator";
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> coordinator =
      coordinator::Coordinator::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  worker::WorkerOptions worker_options;
  worker_options.coordinator_address = (*coordinator)->address();
  worker_options.name = "victim";
  worker_options.memory_cap_bytes = int64_t{1} << 30;
  worker_options.nvcc_path = nvcc;
  worker_options.work_dir = root + "/worker";
  absl::StatusOr<std::unique_ptr<worker::Worker>> worker = worker::Worker::Start(worker_options);
  ASSERT_TRUE(worker.ok()) << worker.status();

  auto channel = grpc::CreateChannel((*coordinator)->address(), grpc::InsecureChannelCredentials());
  CasClient cas(v1::ContentStore::NewStub(channel));
  ASSERT_TRUE(cas.UploadMissing({{DigestOf("int a;\n"), "", "int a;\n"}}).ok());
  v1::SubmitBuildRequest request;
  request.set_workspace_root(root + "/proj");
  *request.mutable_toolchain() = *ComputeToolchainFingerprint(nvcc);
  v1::CompileUnit* unit = request.add_units();
  unit->set_name("planter");
  for (const char* argument : {"-c", "a.cu", "-o", "sub/token.txt"}) unit->add_arguments(argument);
  unit->add_output_paths("sub/token.txt");
  auto* input = unit->add_inputs();
  input->set_path("a.cu");
  *input->mutable_digest() = ToProto(DigestOf("int a;\n"));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  auto reader = v1::BuildService::NewStub(channel)->SubmitBuild(&context, request);
  v1::BuildEvent event;
  std::string seen;
  std::optional<v1::TaskResult> result;
  while (reader->Read(&event)) {
    absl::StrAppend(&seen, event.DebugString());
    if (event.has_unit_finished()) result = event.unit_finished().result();
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(result.has_value()) << seen;
  EXPECT_NE(result->exit_code(), 0) << seen;
  EXPECT_THAT(result->error_message(), HasSubstr("is not a file the compile wrote"));
  EXPECT_THAT(seen, Not(HasSubstr(token)));
  for (const std::string& content : FilesBelow(root + "/coordinator/cas")) {
    EXPECT_THAT(content, Not(HasSubstr(token))) << "the worker uploaded its secret";
  }
}

// --- a worker that reports outputs it never stored ---------------------------

// A registered worker (here a stranger with the right toolchain, talking
// gRPC itself) leases the unit and reports an object that is not in the
// store: the report is refused, nothing is cached, and the unit runs on an
// honest worker.
TEST(LyingWorkerTest, ReportOfOutputsNotInTheStoreIsRefusedAndTheUnitRunsElsewhere) {
  std::string root = testing::NewTempDir("liar-");
  coordinator::CoordinatorOptions options;
  options.state_dir = root + "/coordinator";
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> coordinator =
      coordinator::Coordinator::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::string address = (*coordinator)->address();
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::WorkerService::NewStub(channel);
  v1::RegisterWorkerRequest hello;
  hello.set_name("liar");
  hello.set_slots(1);
  hello.set_memory_cap_bytes(int64_t{4} << 30);
  *hello.mutable_toolchain() = *ComputeToolchainFingerprint(testing::FakeNvccPath());
  v1::RegisterWorkerResponse registered;
  {
    // A worker of a release that cannot read input trees is refused,
    // saying what to do.
    grpc::ClientContext context;
    grpc::Status older = stub->RegisterWorker(&context, hello, &registered);
    EXPECT_EQ(older.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(older.error_message(), HasSubstr("worker 'liar' is from an older release"));
    EXPECT_THAT(older.error_message(), HasSubstr("upgrade the worker"));
  }
  hello.set_reads_input_trees(true);
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->RegisterWorker(&context, hello, &registered).ok());
  }

  ASSERT_TRUE(WriteFileAtomically(root + "/src/api.cu", "int api() { return 1; }\n").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/src/k.toml",
                                  "[build]\noutput = \"libk.so\"\nsources = [\"api.cu\"]\n")
                  .ok());
  std::string output;
  std::future<absl::Status> build = std::async(std::launch::async, [&] {
    client::BuildOptions build_options;
    build_options.plan_path = root + "/src/k.toml";
    build_options.coordinator_address = address;
    build_options.output_dir = root + "/out";
    build_options.nvcc_path = testing::FakeNvccPath();
    std::ostringstream out;
    absl::Status status = client::RunBuild(build_options, out);
    output = out.str();
    return status;
  });

  v1::LeaseTaskRequest want;
  want.set_worker_id(registered.worker_id());
  want.set_wait_ms(20000);
  v1::LeaseTaskResponse lease;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->LeaseTask(&context, want, &lease).ok());
  }
  ASSERT_TRUE(lease.has_task());
  v1::ReportResultRequest lie;
  lie.set_worker_id(registered.worker_id());
  lie.set_task_id(lease.task().task_id());
  lie.mutable_result()->set_outcome(v1::TASK_COMPLETED);
  lie.mutable_result()->set_toolchain_digest(hello.toolchain().digest());
  auto* object = lie.mutable_result()->add_outputs();
  object->set_path(lease.task().unit().output_paths(0));
  *object->mutable_digest() = ToProto(DigestOf("an object nobody uploaded"));
  v1::ReportResultResponse ignored;
  grpc::Status refused;
  {
    grpc::ClientContext context;
    refused = stub->ReportResult(&context, lie, &ignored);
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("not in the content store"));

  // An honest worker takes the unit over.
  worker::WorkerOptions honest;
  honest.coordinator_address = address;
  honest.name = "honest";
  honest.memory_cap_bytes = int64_t{4} << 30;
  honest.nvcc_path = testing::FakeNvccPath();
  honest.work_dir = root + "/honest";
  honest.sandbox = geteuid() == 0;
  absl::StatusOr<std::unique_ptr<worker::Worker>> worker = worker::Worker::Start(honest);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_EQ(build.wait_for(std::chrono::minutes(2)), std::future_status::ready);
  EXPECT_TRUE(build.get().ok()) << output;
  EXPECT_THAT(output, HasSubstr("the report of worker liar was refused"));
  EXPECT_THAT(output, HasSubstr("] api                "));
  EXPECT_THAT(output, HasSubstr("honest"));
  EXPECT_THAT(output, HasSubstr("workers   1 (honest: 1)"));
}

}  // namespace
}  // namespace distcc_cuda
