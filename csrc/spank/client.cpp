// The plugin's gRPC calls to the interconnect manager (see client.hpp).
//
// One Session per moment of a job: a fresh channel (local subchannel pool, no
// retries), one deadline for the whole session (connect_timeout + timeout from
// its start), and one log line if anything fails.  A channel lives only as long
// as its session, and nothing here is kept between hooks.
#include "client.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include "sdnmpi/wire/manager.grpc.pb.h"

namespace sdnmpi::spank {
namespace {

namespace pb = ::sdnmpi::manager::v1;
using Clock = std::chrono::system_clock;  // gRPC deadlines take system_clock

// Room for a 64 MiB pattern file plus the rest of a CreateJobRequest.
constexpr int kMaxSendBytes = static_cast<int>(kMaxPatternBytes) + (1 << 20);
constexpr int kMaxReceiveBytes = 16 << 20;
// WaitRoutes asks the manager to give up this much before our own deadline, so
// that its answer (with the job's state) arrives rather than our DEADLINE_EXCEEDED.
constexpr auto kWaitMargin = std::chrono::milliseconds(250);

Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

const char *code_name(grpc::StatusCode code) {
    switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
    }
}

std::string state_name(pb::JobState state) {
    std::string name = pb::JobState_Name(state);
    const std::string prefix = "JOB_STATE_";
    if (name.compare(0, prefix.size(), prefix) == 0) name.erase(0, prefix.size());
    return name.empty() ? std::to_string(static_cast<int>(state)) : name;
}

std::string status_text(const grpc::Status &st) {
    std::string text = code_name(st.error_code());
    if (!st.error_message().empty()) text += ": " + one_line(st.error_message());
    return text;
}

// Whether a unix socket accepts connections; the reason if it does not.  gRPC
// says only "failed to connect"; errno says which of missing, refused, denied.
std::string probe_unix_socket(const std::string &path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return std::string("socket: ") + std::strerror(errno);
    struct sockaddr_un sa {};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);  // length checked by the parser
    std::string err;
    if (connect(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof sa) != 0 &&
        errno != EINPROGRESS && errno != EAGAIN)
        err = "connect " + path + ": " + std::strerror(errno);
    close(fd);
    return err;
}

// A whole small secret file, trailing whitespace removed.
std::string read_secret(const std::string &path, const char *what, std::string &out) {
    std::string data;
    std::string err = read_pattern_file(path, 1 << 20, data, what);
    if (!err.empty()) return err;
    while (!data.empty() && (data.back() == '\n' || data.back() == '\r' || data.back() == ' '))
        data.pop_back();
    out.swap(data);
    return "";
}

// gRPC's own log lines (e.g. a failed TLS handshake) would go to stderr, which
// is the user's terminal under srun: they go to our logger at debug level, and
// the last error is kept to explain a failed connection in the one line.
// Never destroyed: gRPC's threads may log while the process exits.
struct GrpcLog {
    std::mutex mu;
    Logger sink;
    std::string last_error;
};

GrpcLog &grpc_log() {
    static GrpcLog *log = new GrpcLog;
    return *log;
}

void grpc_log_sink(gpr_log_func_args *args) {
    if (args == nullptr || args->message == nullptr) return;
    GrpcLog &gl = grpc_log();
    Logger sink;
    {
        std::lock_guard<std::mutex> lock(gl.mu);
        if (args->severity == GPR_LOG_SEVERITY_ERROR) gl.last_error = args->message;
        sink = gl.sink;
    }
    if (sink) sink(LogLevel::kDebug, "grpc: " + one_line(args->message, 400));
}

void capture_grpc_log(const Logger &log) {
    static std::once_flag once;
    std::call_once(once, [] { gpr_set_log_function(grpc_log_sink); });
    GrpcLog &gl = grpc_log();
    std::lock_guard<std::mutex> lock(gl.mu);
    gl.sink = log;
    gl.last_error.clear();
}

std::string last_grpc_error() {
    GrpcLog &gl = grpc_log();
    std::lock_guard<std::mutex> lock(gl.mu);
    return gl.last_error;
}

class Session {
  public:
    Session(const Config &cfg, std::uint64_t job_id, const Logger &log)
        : cfg_(cfg), job_id_(job_id), log_(log), start_(Clock::now()),
          connect_end_(start_ + seconds(cfg.connect_timeout_s)),
          end_(connect_end_ + seconds(cfg.timeout_s)) {}

    // Reach the manager within connect_timeout.  On failure the reason is in *why.
    bool connect(std::string *why);

    // One unary call, bounded by the session's deadline.
    template <typename Req, typename Resp, typename Method>
    grpc::Status call(Method method, const Req &req, Resp *resp) {
        grpc::ClientContext ctx;
        ctx.set_deadline(end_);
        if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
        return ((*stub_).*method)(&ctx, req, resp);
    }

    Clock::time_point end() const { return end_; }
    Clock::time_point start() const { return start_; }

    // Log the one line of a failed session; the outcome the caller returns.
    Outcome fail(const std::string &what) const {
        std::string tail = cfg_.require ? "; job " + std::to_string(job_id_) + " fails (require=1)"
                                        : "; job " + std::to_string(job_id_) +
                                              " runs on default routes";
        log_(LogLevel::kError, what + tail);
        return cfg_.require ? Outcome::kFailClosed : Outcome::kFailOpen;
    }

    // The line for a call that answered with an error status.
    std::string rpc_failure(const char *rpc, const grpc::Status &st) const {
        std::string mgr = "manager " + cfg_.manager.text;
        switch (st.error_code()) {
        case grpc::StatusCode::UNAVAILABLE:
            return mgr + " unreachable during " + rpc + " (" + status_text(st) + ")";
        case grpc::StatusCode::DEADLINE_EXCEEDED:
            return mgr + " did not answer " + rpc + " in time (" + status_text(st) + ")";
        default: return mgr + " refused " + rpc + " (" + status_text(st) + ")";
        }
    }

    Outcome unreachable(const std::string &why) const {
        return fail("manager " + cfg_.manager.text + " unreachable (" + why + ")");
    }

  private:
    std::shared_ptr<grpc::ChannelCredentials> credentials(std::string *why);

    const Config &cfg_;
    std::uint64_t job_id_;
    const Logger &log_;
    Clock::time_point start_;
    Clock::time_point connect_end_;
    Clock::time_point end_;
    std::string token_;
    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<pb::Manager::Stub> stub_;
};

std::shared_ptr<grpc::ChannelCredentials> Session::credentials(std::string *why) {
    if (cfg_.tls_ca.empty()) return grpc::InsecureChannelCredentials();
    grpc::SslCredentialsOptions ssl;
    std::string err = read_secret(cfg_.tls_ca, "tls_ca", ssl.pem_root_certs);
    if (err.empty() && !cfg_.token_file.empty())
        err = read_secret(cfg_.token_file, "token_file", token_);
    if (err.empty() && token_.find_first_of("\r\n") != std::string::npos)
        err = "token_file: the token spans several lines";
    if (!err.empty()) {
        *why = err;
        return nullptr;
    }
    return grpc::SslCredentials(ssl);
}

bool Session::connect(std::string *why) {
    if (cfg_.manager.kind == AddressKind::kUnix) {
        *why = probe_unix_socket(cfg_.manager.unix_path);
        if (!why->empty()) return false;
    }
    std::shared_ptr<grpc::ChannelCredentials> creds = credentials(why);
    if (!creds) return false;
    capture_grpc_log(log_);
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(kMaxSendBytes);
    args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    // A fresh connection per session: never one left in reconnect backoff.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(cfg_.manager.target, creds, args);
    grpc_connectivity_state state = channel_->GetState(true);
    while (state != GRPC_CHANNEL_READY) {
        if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
            std::string detail = last_grpc_error();
            *why = "connection failed" + (detail.empty() ? "" : ": " + one_line(detail));
            return false;
        }
        if (!channel_->WaitForStateChange(state, connect_end_)) {
            *why = "no connection within " + format_seconds(cfg_.connect_timeout_s);
            return false;
        }
        state = channel_->GetState(true);
    }
    stub_ = pb::Manager::NewStub(channel_);
    return true;
}

void fill_pattern(PatternArg &&pattern, pb::CreateJobRequest *req) {
    pb::PatternSource *src = req->mutable_pattern();
    if (pattern.kind == PatternKind::kName) {
        src->set_name(pattern.name);
        return;
    }
    pb::PatternFile *file = src->mutable_file();
    file->set_filename(pattern.filename);
    file->set_data(std::move(pattern.data));
}

std::string pattern_label(const PatternArg &pattern) {
    return pattern.kind == PatternKind::kName
               ? "pattern " + pattern.name
               : "pattern file " + pattern.filename + " (" + std::to_string(pattern.data.size()) +
                     " bytes)";
}

// The WaitRoutes timeout: the configured bound, cut to what the session has left.
std::uint32_t wait_timeout_ms(const Config &cfg, Clock::time_point end) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    auto bound = std::chrono::duration_cast<std::chrono::milliseconds>(seconds(cfg.timeout_s));
    auto ms = left - kWaitMargin < bound ? left - kWaitMargin : bound;
    if (ms.count() < 1) ms = left.count() > 1 ? left / 2 : std::chrono::milliseconds(1);
    return static_cast<std::uint32_t>(ms.count());
}

std::string route_summary(const pb::RouteStatus &rs) {
    return std::to_string(rs.pairs()) + " pairs, " + std::to_string(rs.flow_mods()) +
           " flow mods on " + std::to_string(rs.switches()) + " switches";
}

}  // namespace

Outcome offer_job(const Config &cfg, const JobInfo &job, PatternArg pattern, const Logger &log) {
    Session s(cfg, job.job_id, log);
    std::string why;
    if (!s.connect(&why)) return s.unreachable(why);
    pb::CreateJobRequest req;
    req.set_job_id(job.job_id);
    req.set_name(job.name);
    req.set_uid(job.uid);
    req.set_ntasks(job.ntasks);
    std::string label = pattern_label(pattern);
    fill_pattern(std::move(pattern), &req);
    pb::Offer offer;
    grpc::Status st = s.call(&pb::Manager::Stub::OfferJob, req, &offer);
    if (!st.ok()) return s.fail(s.rpc_failure("OfferJob", st));
    log(LogLevel::kVerbose, "job " + std::to_string(job.job_id) + " (" +
                                std::to_string(job.ntasks) + " tasks, " + label +
                                ") offered to manager " + cfg.manager.text);
    return Outcome::kOk;
}

Outcome register_and_wait(const Config &cfg, const JobInfo &info, const std::string &node,
                          const std::vector<TaskInfo> &tasks, const Logger &log) {
    const std::uint64_t job_id = info.job_id;
    Session s(cfg, job_id, log);
    std::string why;
    if (!s.connect(&why)) return s.unreachable(why);
    pb::CreateJobRequest create;
    create.set_job_id(job_id);
    create.set_name(info.name);
    create.set_uid(info.uid);
    create.set_ntasks(info.ntasks);
    create.set_from_offer(true);
    pb::Job created;
    grpc::Status st = s.call(&pb::Manager::Stub::CreateJob, create, &created);
    if (!st.ok()) return s.fail(s.rpc_failure("CreateJob", st));
    pb::JobRef ref;
    ref.set_job_id(job_id);
    pb::Job started;
    st = s.call(&pb::Manager::Stub::StartJob, ref, &started);
    if (!st.ok()) return s.fail(s.rpc_failure("StartJob", st));
    for (const TaskInfo &t : tasks) {
        pb::RegisterProcessRequest req;
        req.set_job_id(job_id);
        req.set_rank(t.rank);
        req.set_node(node);
        req.set_pid(t.pid);
        pb::Job job;
        st = s.call(&pb::Manager::Stub::RegisterProcess, req, &job);
        if (!st.ok()) return s.fail(s.rpc_failure("RegisterProcess", st));
    }
    pb::WaitRoutesRequest req;
    req.set_job_id(job_id);
    req.set_timeout_ms(wait_timeout_ms(cfg, s.end()));
    pb::RouteStatus rs;
    st = s.call(&pb::Manager::Stub::WaitRoutes, req, &rs);
    std::string job = "job " + std::to_string(job_id);
    std::string bound = format_seconds(cfg.timeout_s);
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
        return s.fail("routes of " + job + " not installed within " + bound + " (" +
                      status_text(st) + ")");
    if (!st.ok()) return s.fail(s.rpc_failure("WaitRoutes", st));
    if (rs.state() == pb::JOB_STATE_DEFAULT)
        return s.fail("manager did not route " + job + " (" + one_line(rs.detail()) + ")");
    if (!rs.installed())
        return s.fail("routes of " + job + " not installed within " + bound + " (state " +
                      state_name(rs.state()) + ")");
    double waited_s = std::chrono::duration<double>(Clock::now() - s.start()).count();
    log(LogLevel::kInfo, job + " routes installed (" + route_summary(rs) + "); node " +
                             one_line(node) + " waited " + format_seconds(waited_s) +
                             " for " + std::to_string(tasks.size()) + " tasks");
    return Outcome::kOk;
}

Outcome finish_job(const Config &cfg, std::uint64_t job_id, bool quiet, const Logger &log) {
    Session s(cfg, job_id, log);
    std::string why;
    std::string failure;
    pb::JobRef ref;
    ref.set_job_id(job_id);
    pb::Job job;
    grpc::Status st;
    if (!s.connect(&why)) {
        failure = "manager " + cfg.manager.text + " unreachable (" + why + ")";
    } else {
        st = s.call(&pb::Manager::Stub::FinishJob, ref, &job);
        if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
            log(LogLevel::kDebug, "job " + std::to_string(job_id) + " unknown to the manager");
            return Outcome::kOk;
        }
        if (!st.ok()) failure = s.rpc_failure("FinishJob", st);
    }
    if (failure.empty()) {
        log(LogLevel::kVerbose, "job " + std::to_string(job_id) + " finished, state " +
                                    state_name(job.state()));
        return Outcome::kOk;
    }
    std::string line = failure + "; job " + std::to_string(job_id) +
                       " may keep its routes until the manager finishes it";
    log(quiet ? LogLevel::kVerbose : LogLevel::kError, line);
    return cfg.require ? Outcome::kFailClosed : Outcome::kFailOpen;
}

}  // namespace sdnmpi::spank
