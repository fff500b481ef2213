// fake_slurm_host: loads sdnmpi_spank.so the way srun, sbatch, slurmstepd and
// slurmd do (dlopen, RTLD_NOW: the plugin is linked -z now) and calls its hooks
// in Slurm's order for one context, providing the SPANK API it uses
// (spank_context, spank_option_register, spank_get_item with Slurm's
// per-context item rules, spank_setenv on the job's environment (remote only),
// spank_strerror, slurm_error/info/verbose/debug).
// Not Slurm: a harness to test the plugin's glue without slurmd.
//
//   fake_slurm_host PLUGIN CONTEXT [options] [-- PLUGSTACK_ARGS...]
//   CONTEXT: local (srun) | remote (slurmstepd) | allocator (sbatch) | slurmd
//   options: --opt VALUE (--comm-pattern)  --job N  --step N  --node-id N  --uid N
//            --ntasks N  --name NAME (SLURM_JOB_NAME)  --tasks RANK:PID[,RANK:PID...]
//            --env NAME=VALUE (in the job's environment; repeatable)
//
// Prints each hook's return code ("init=0", "option=-1", "task_post_fork[1]=0",
// ...) on stdout, then the job's environment after the hooks ("env NAME=VALUE"
// lines), and the plugin's log lines on stderr as "LEVEL: MESSAGE".
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}

struct spank_handle {
    int unused;
};

namespace {

struct Task {
    std::uint32_t rank;
    pid_t pid;
};

struct Fake {
    spank_context_t ctx = S_CTX_ERROR;
    bool in_init = false;
    int task = -1;  // the task of the running task hook, or -1
    std::uint32_t job_id = 42;
    std::uint32_t step_id = 0;
    std::uint32_t node_id = 0;
    std::uint32_t uid = 1000;
    std::uint32_t ntasks = 2;
    std::vector<Task> tasks;
    std::vector<std::string> env_store;
    std::vector<char *> env;
    std::vector<char *> argv;
    std::vector<struct spank_option> options;
};

Fake f;

spank_err_t err(int code) { return static_cast<spank_err_t>(code); }

// Slurm's rule: in srun only these items exist; in sbatch only uid and gid.
bool item_allowed(spank_item_t item) {
    if (f.ctx == S_CTX_REMOTE) return true;
    if (f.ctx == S_CTX_ALLOCATOR) return item == S_JOB_UID || item == S_JOB_GID;
    if (f.ctx != S_CTX_LOCAL) return false;
    switch (item) {
    case S_JOB_UID:
    case S_JOB_GID:
    case S_JOB_ID:
    case S_JOB_STEPID:
    case S_JOB_ARGV:
    case S_JOB_ENV:
    case S_JOB_TOTAL_TASK_COUNT:
    case S_JOB_NNODES: return true;
    default: return false;
    }
}

bool task_item(spank_item_t item) { return item == S_TASK_GLOBAL_ID || item == S_TASK_PID; }

void vlog(const char *level, const char *fmt, va_list ap) {
    std::fprintf(stderr, "%s: ", level);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
}

// S_JOB_ENV's array, after f.env_store changed.
void rebuild_env() {
    f.env.clear();
    for (std::string &e : f.env_store) f.env.push_back(e.data());
    f.env.push_back(nullptr);
}

std::uint32_t number(const char *text) {
    return static_cast<std::uint32_t>(std::strtoul(text, nullptr, 0));
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) spank_context_t spank_context(void) { return f.ctx; }

__attribute__((visibility("default"))) const char *spank_strerror(spank_err_t e) {
    return e == ESPANK_NOT_TASK ? "Not in task context" : "Not available in this context";
}

__attribute__((visibility("default"))) spank_err_t spank_option_register(spank_t,
                                                                         struct spank_option *o) {
    if (!f.in_init) return err(ESPANK_BAD_ARG);
    f.options.push_back(*o);
    return err(ESPANK_SUCCESS);
}

__attribute__((visibility("default"))) spank_err_t spank_get_item(spank_t, spank_item_t item,
                                                                  ...) {
    if (!item_allowed(item)) return err(ESPANK_NOT_REMOTE);
    if (task_item(item) && f.task < 0) return err(ESPANK_NOT_TASK);
    va_list ap;
    va_start(ap, item);
    spank_err_t rc = err(ESPANK_SUCCESS);
    switch (item) {
    case S_JOB_ID: *va_arg(ap, std::uint32_t *) = f.job_id; break;
    case S_JOB_STEPID: *va_arg(ap, std::uint32_t *) = f.step_id; break;
    case S_JOB_NODEID: *va_arg(ap, std::uint32_t *) = f.node_id; break;
    case S_JOB_UID: *va_arg(ap, uid_t *) = f.uid; break;
    case S_JOB_TOTAL_TASK_COUNT: *va_arg(ap, std::uint32_t *) = f.ntasks; break;
    case S_JOB_LOCAL_TASK_COUNT:
        *va_arg(ap, std::uint32_t *) = static_cast<std::uint32_t>(f.tasks.size());
        break;
    case S_JOB_ENV: *va_arg(ap, char ***) = f.env.data(); break;
    case S_JOB_ARGV:
        *va_arg(ap, int *) = static_cast<int>(f.argv.size()) - 1;
        *va_arg(ap, char ***) = f.argv.data();
        break;
    case S_TASK_GLOBAL_ID: *va_arg(ap, std::uint32_t *) = f.tasks[f.task].rank; break;
    case S_TASK_PID: *va_arg(ap, pid_t *) = f.tasks[f.task].pid; break;
    default: rc = err(ESPANK_BAD_ARG);
    }
    va_end(ap);
    return rc;
}

// Slurm's rule: the job's environment exists in the remote context only.
__attribute__((visibility("default"))) spank_err_t spank_setenv(spank_t, const char *var,
                                                                const char *val, int overwrite) {
    if (f.ctx != S_CTX_REMOTE) return err(ESPANK_NOT_REMOTE);
    if (var == nullptr || val == nullptr) return err(ESPANK_BAD_ARG);
    std::string prefix = std::string(var) + "=";
    for (std::string &e : f.env_store) {
        if (e.compare(0, prefix.size(), prefix) != 0) continue;
        if (overwrite == 0) return err(ESPANK_ENV_EXISTS);
        e = prefix + val;
        rebuild_env();
        return err(ESPANK_SUCCESS);
    }
    f.env_store.push_back(prefix + val);
    rebuild_env();
    return err(ESPANK_SUCCESS);
}

__attribute__((visibility("default"))) void slurm_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog("error", fmt, ap);
    va_end(ap);
}

__attribute__((visibility("default"))) void slurm_info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog("info", fmt, ap);
    va_end(ap);
}

__attribute__((visibility("default"))) void slurm_verbose(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog("verbose", fmt, ap);
    va_end(ap);
}

__attribute__((visibility("default"))) void slurm_debug(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog("debug", fmt, ap);
    va_end(ap);
}

}  // extern "C"

namespace {

using Hook = int (*)(spank_t, int, char **);

struct Plugin {
    void *dl = nullptr;
    std::vector<char *> args;
    spank_handle handle{0};

    // Call hook `name` if the plugin defines it; print its return code.
    int call(const char *name, const std::string &label = "") {
        void *sym = dlsym(dl, name);
        if (sym == nullptr) return 0;
        Hook hook = reinterpret_cast<Hook>(sym);
        int rc = hook(&handle, static_cast<int>(args.size()), args.data());
        std::printf("%s=%d\n", label.empty() ? name + 12 : label.c_str(), rc);  // "slurm_spank_"
        return rc;
    }
};

int parse_args(int argc, char **argv, std::string &opt, bool &have_opt, std::vector<char *> &rest) {
    for (int i = 3; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--") {
            rest.assign(argv + i + 1, argv + argc);
            return 0;
        }
        if (i + 1 >= argc) return -1;
        const char *v = argv[++i];
        if (a == "--opt") {
            opt = v;
            have_opt = true;
        } else if (a == "--job") {
            f.job_id = number(v);
        } else if (a == "--step") {
            f.step_id = number(v);
        } else if (a == "--node-id") {
            f.node_id = number(v);
        } else if (a == "--uid") {
            f.uid = number(v);
        } else if (a == "--ntasks") {
            f.ntasks = number(v);
        } else if (a == "--name") {
            f.env_store.push_back(std::string("SLURM_JOB_NAME=") + v);
        } else if (a == "--env") {
            if (std::strchr(v, '=') == nullptr) return -1;
            f.env_store.push_back(v);
        } else if (a == "--tasks") {
            for (char *tok = std::strtok(const_cast<char *>(v), ","); tok != nullptr;
                 tok = std::strtok(nullptr, ",")) {
                char *colon = std::strchr(tok, ':');
                if (colon == nullptr) return -1;
                f.tasks.push_back(Task{number(tok), static_cast<pid_t>(number(colon + 1))});
            }
        } else {
            return -1;
        }
    }
    return 0;
}

spank_context_t context_of(const std::string &name) {
    if (name == "local") return S_CTX_LOCAL;
    if (name == "remote") return S_CTX_REMOTE;
    if (name == "allocator") return S_CTX_ALLOCATOR;
    if (name == "slurmd") return S_CTX_SLURMD;
    return S_CTX_ERROR;
}

// Slurm's order of hooks in each context (spank.h).
int run(Plugin &p, bool have_opt, const std::string &opt) {
    f.in_init = true;
    int rc = p.call("slurm_spank_init");
    f.in_init = false;
    std::printf("registered=%zu\n", f.options.size());
    if (rc != 0) return 1;
    bool remote = f.ctx == S_CTX_REMOTE;
    for (const struct spank_option &o : f.options) {
        if (!have_opt || std::strcmp(o.name, "comm-pattern") != 0) continue;
        int orc = o.cb(o.val, opt.c_str(), remote ? 1 : 0);
        std::printf("option=%d\n", orc);
        if (orc != 0) return 1;
    }
    p.call("slurm_spank_init_post_opt");
    if (f.ctx == S_CTX_LOCAL) p.call("slurm_spank_local_user_init");
    if (remote) {
        p.call("slurm_spank_user_init");
        for (std::size_t i = 0; i < f.tasks.size(); i++) {
            f.task = static_cast<int>(i);
            p.call("slurm_spank_task_post_fork", "task_post_fork[" + std::to_string(i) + "]");
        }
        f.task = -1;
    }
    p.call("slurm_spank_exit");
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: fake_slurm_host PLUGIN CONTEXT [options] [-- ARGS...]\n");
        return 2;
    }
    f.ctx = context_of(argv[2]);
    std::string opt;
    bool have_opt = false;
    Plugin p;
    if (f.ctx == S_CTX_ERROR || parse_args(argc, argv, opt, have_opt, p.args) != 0) {
        std::fprintf(stderr, "fake_slurm_host: bad arguments\n");
        return 2;
    }
    rebuild_env();
    static char prog[] = "/usr/bin/mpi_app";
    f.argv = {prog, nullptr};
    p.dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (p.dl == nullptr) {
        std::fprintf(stderr, "fake_slurm_host: dlopen: %s\n", dlerror());
        return 2;
    }
    const char *name = static_cast<const char *>(dlsym(p.dl, "plugin_name"));
    const char *type = static_cast<const char *>(dlsym(p.dl, "plugin_type"));
    std::printf("plugin=%s type=%s\n", name ? name : "?", type ? type : "?");
    int rc = run(p, have_opt, opt);
    for (const std::string &e : f.env_store) std::printf("env %s\n", e.c_str());
    dlclose(p.dl);  // srun and slurmstepd unload plugins before they exit
    std::printf("unloaded\n");
    std::fflush(stdout);
    return rc;
}
