/*
 * gpu_healthcheck.so: the SPANK side of gpu-healthcheck.
 *
 *   plugstack.conf:
 *   required /usr/lib/gpu-healthcheck/gpu_healthcheck.so exec=/usr/bin/gpu-healthcheck \
 *            level=quick allow_full=yes allow_deep=no run=prolog,epilog,report
 *
 * It only runs gpu-healthcheck and passes its result on; every judgement stays in Python:
 *   slurm_spank_job_prolog  ->  EXEC --prolog --level L   (non-zero: the job must not start here)
 *   slurm_spank_job_epilog  ->  EXEC --epilog             (non-zero: it drained the node)
 *   slurm_spank_task_exit   ->  EXEC --job-report         (the first task of the step on this
 *                                                           node that exits non-zero: as the job's
 *                                                           user, into that task's own stderr)
 *   slurm_spank_task_init   ->  EXEC --job-report         (the first task of a requeued batch
 *                                                           job: why it was requeued)
 *   with allow_gang=yes, as root (the gang check's privileged side, never the job's code):
 *   slurm_spank_task_exit   ->  EXEC --gang --act         (rank 0 of a `gpu-healthcheck --gang`
 *                                                           step exited 2: measure again, drain
 *                                                           the bad node, requeue the job)
 *   slurm_spank_task_init_privileged -> EXEC --gang --act (the batch script's task, when the
 *                                                           job asked --gpu-healthcheck=gang)
 * The privileged side gets slurmstepd's own environment, never the job's, with SLURM_JOB_ID
 * set from S_JOB_ID; its lines go into the task's stderr, the job's output.
 * and registers --gpu-healthcheck=quick|full|deep for sbatch, srun and salloc (full unless
 * allow_full=no, deep only with allow_deep=yes: minutes of on-device tests); the choice reaches
 * the prolog as SPANK_GPU_HEALTHCHECK_LEVEL (spank job control environment), which both this
 * plugin and the Prolog= script read.  The prolog and epilog get our deadline as
 * GPU_HEALTHCHECK_DEADLINE_S, so gpu-healthcheck's own bounds shrink to end before it; the
 * reports run with a clean environment (none of the job's LD_PRELOAD, PYTHONPATH or PATH).
 *
 * Failure rules: a problem of our own (EXEC missing, crashed, past its deadline) is logged to
 * slurmd's log and the job goes on; only EXEC's own non-zero exit fails a prolog or epilog, so
 * a node fault fails exactly as the scripts do.  A malformed argument is logged, naming it, and
 * that argument keeps its default.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(gpu_healthcheck, 1);

#define PLUGIN "gpu_healthcheck"
#define DEFAULT_EXEC "/usr/bin/gpu-healthcheck"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define LEVEL_VAR "GPU_HEALTHCHECK_LEVEL" /* the prolog sees SPANK_GPU_HEALTHCHECK_LEVEL */
#define DEADLINE_VAR "GPU_HEALTHCHECK_DEADLINE_S" /* prolog/epilog: seconds until our SIGTERM */
#define CONFIG_VAR "GPU_HEALTHCHECK_CONFIG"      /* the reports take slurmd's, never the job's */
#define REPORT_TIMEOUT_S 15                /* --job-report: a fast NVML read */
#define GANG_TIMEOUT_S 900                 /* --gang --act: a backstop; [internode] gang_timeout_s
					    * bounds the check itself */
#define UNBOUNDED_TIMEOUT_S 600            /* no PrologEpilogTimeout and no timeout= */
#define MAX_TASKS 1024
#define USAGE_EXIT 3 /* gpu-healthcheck: a command-line mistake; prolog/epilog never exit 3 */

struct conf {
	char exec[PATH_MAX];
	char level[8];      /* quick | full: the level when the job asks for none */
	int allow_full;     /* may a job ask for --gpu-healthcheck=full? */
	int allow_deep;     /* may a job ask for --gpu-healthcheck=deep? (minutes: off by default) */
	int run_prolog, run_epilog, run_report;
	int allow_gang;     /* does root run the gang check's privileged side (drain, requeue)? */
	int timeout_s;      /* prolog/epilog deadline; 0: PrologEpilogTimeout less a margin */
};

/* Plugin state: one plugin instance per process (sbatch, slurmstepd, slurmstepd spank). */
static struct conf conf;
static char requested[8];          /* --gpu-healthcheck value given on this command line */
static int fd_socks[2] = {-1, -1}; /* task children pass their stderr back to slurmstepd */
static int task_stderr[MAX_TASKS]; /* local task id -> its stderr (+1: 0 means none) */
static int reported;               /* slurmstepd: the step's exit report has run on this node */

/* slurmstepd (libslurmfull) exports its configuration; weak, so sbatch without it still loads */
extern slurm_conf_t slurm_conf __attribute__((weak));

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option level_option = {
	"gpu-healthcheck", "quick|full|deep|gang",
	"GPU health check before the job starts: quick (default), full, a memory test of "
	"most of each of the job's GPUs, or deep, minutes of memory, bandwidth and compute "
	"tests where the cluster allows it; gang: a short collective over a multi-node job's "
	"nodes before its script starts (gpu-healthcheck)",
	1, 0, opt_cb,
};

/* ------------------------------------------------------------------ arguments */

static int parse_run(const char *value, struct conf *c)
{
	char buf[64], *save = NULL, *part;
	int prolog = 0, epilog = 0, report = 0;

	if (strlen(value) >= sizeof(buf) || !*value)
		return -1;
	strcpy(buf, value);
	for (part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
		if (!strcmp(part, "prolog"))
			prolog = 1;
		else if (!strcmp(part, "epilog"))
			epilog = 1;
		else if (!strcmp(part, "report"))
			report = 1;
		else
			return -1;
	}
	c->run_prolog = prolog;
	c->run_epilog = epilog;
	c->run_report = report;
	return 0;
}

static int parse_yes_no(const char *value, int *out)
{
	if (!strcmp(value, "yes") || !strcmp(value, "1") || !strcmp(value, "true"))
		*out = 1;
	else if (!strcmp(value, "no") || !strcmp(value, "0") || !strcmp(value, "false"))
		*out = 0;
	else
		return -1;
	return 0;
}

/* level=: the prolog's default, never deep (minutes in every job start; deep stays a job's
 * ask, or the idle-node sweep's). */
static int valid_level(const char *value)
{
	return value && (!strcmp(value, "quick") || !strcmp(value, "full"));
}

/* What a job may ask for with --gpu-healthcheck= (then bounded by allow_full=/allow_deep=/
 * allow_gang=).  gang is no prolog level: the prolog runs its default for it. */
static int valid_ask(const char *value)
{
	return valid_level(value) || (value && (!strcmp(value, "deep") || !strcmp(value, "gang")));
}

static int is_gang(const char *value)
{
	return value && !strcmp(value, "gang");
}

/* Is the job's ask disabled here?  Names the argument that disables it, else NULL. */
static const char *ask_disabled(const char *value)
{
	if (!strcmp(value, "full") && !conf.allow_full)
		return "allow_full=no";
	if (!strcmp(value, "deep") && !conf.allow_deep)
		return "allow_deep=no";
	if (is_gang(value) && !conf.allow_gang)
		return "allow_gang=no";
	return NULL;
}

/* Fills conf from the plugstack.conf arguments; logs every malformed one by name (loud: in
 * slurmd and its prolog/epilog; elsewhere only at debug level, so that users' commands and job
 * outputs do not repeat an admin's typo).  Returns the number of malformed arguments (each
 * keeps its default). */
static int parse_args(int ac, char **av)
{
	spank_context_t ctx = spank_context();
	int loud = ctx == S_CTX_SLURMD || ctx == S_CTX_JOB_SCRIPT;
	int i, bad = 0;

	snprintf(conf.exec, sizeof(conf.exec), "%s", DEFAULT_EXEC);
	snprintf(conf.level, sizeof(conf.level), "quick");
	conf.allow_full = 1;
	conf.allow_deep = 0;
	conf.allow_gang = 0;
	conf.run_prolog = conf.run_epilog = conf.run_report = 1;
	conf.timeout_s = 0;

	for (i = 0; i < ac; i++) {
		const char *arg = av[i], *eq = strchr(arg, '=');
		const char *value = eq ? eq + 1 : "";
		size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
		const char *problem = NULL;
		char *end;
		long n;

#define KEY(k) (klen == strlen(k) && !strncmp(arg, k, klen))
		if (!eq)
			problem = "expected KEY=VALUE";
		else if (KEY("exec")) {
			if (value[0] != '/' || strlen(value) >= sizeof(conf.exec))
				problem = "exec= takes an absolute path";
			else
				snprintf(conf.exec, sizeof(conf.exec), "%s", value);
		} else if (KEY("level")) {
			if (!valid_level(value))
				problem = "level= takes quick or full (deep only as a job's ask, "
					  "with allow_deep=yes)";
			else
				snprintf(conf.level, sizeof(conf.level), "%s", value);
		} else if (KEY("allow_full")) {
			if (parse_yes_no(value, &conf.allow_full))
				problem = "allow_full= takes yes or no";
		} else if (KEY("allow_deep")) {
			if (parse_yes_no(value, &conf.allow_deep))
				problem = "allow_deep= takes yes or no";
		} else if (KEY("allow_gang")) {
			if (parse_yes_no(value, &conf.allow_gang))
				problem = "allow_gang= takes yes or no";
		} else if (KEY("run")) {
			if (parse_run(value, &conf))
				problem = "run= takes a comma list of prolog, epilog, report";
		} else if (KEY("timeout")) {
			errno = 0;
			n = strtol(value, &end, 10);
			if (errno || end == value || *end || n < 1 || n > 86400)
				problem = "timeout= takes seconds, 1 to 86400";
			else
				conf.timeout_s = (int) n;
		} else
			problem = "unknown argument; known: exec= level= allow_full= allow_deep= "
				  "allow_gang= run= timeout=";
#undef KEY
		if (problem) {
			if (loud)
				slurm_error("%s: plugstack.conf argument '%s' ignored: %s",
					    PLUGIN, arg, problem);
			else
				slurm_debug("%s: plugstack.conf argument '%s' ignored: %s",
					    PLUGIN, arg, problem);
			bad++;
		}
	}
	if (loud && !conf.allow_full && !strcmp(conf.level, "full")) {
		slurm_error("%s: plugstack.conf: level=full with allow_full=no; every job gets full",
			    PLUGIN);
	}
	return bad;
}

/* ------------------------------------------------------------------ running EXEC */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Logs what EXEC printed, one slurmd log line per line. */
static void log_output(const char *what, char *buf, size_t len, int as_error)
{
	char *line, *save = NULL;

	buf[len] = '\0';
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (as_error)
			slurm_error("%s: %s: %s", PLUGIN, what, line);
		else
			slurm_info("%s: %s: %s", PLUGIN, what, line);
	}
}

struct run {
	const char *what;   /* "prolog", "epilog", "job-report" */
	char *const *argv;
	char **envp;        /* NULL: inherit */
	int out_fd;         /* -1: capture output into slurmd's log */
	uid_t uid;          /* (uid_t)-1: keep */
	gid_t gid;
	gid_t *gids;
	int ngids;
	int timeout_s;
	int in_job;         /* slurmstepd of a job: its error() also lands in the job's stderr */
	int pass_deadline;  /* put timeout_s into EXEC's environment as DEADLINE_VAR */
};

/* Our own failures go to slurmd's log; inside a job only at info level, which slurmstepd keeps
 * out of the job's output (the user can do nothing about them). */
#define RUN_ERROR(r, ...) ((r)->in_job ? slurm_info(__VA_ARGS__) : slurm_error(__VA_ARGS__))

enum outcome { RAN, NOT_RUN, TIMED_OUT, CRASHED };

/* fork, exec, wait with a deadline.  On RAN *status is EXEC's exit status. */
static enum outcome run_exec(const struct run *r, int *status)
{
	int errpipe[2], outpipe[2] = {-1, -1}, exec_errno = 0, wstatus = 0;
	char out[8192];
	size_t outlen = 0;
	double deadline = now_s() + r->timeout_s, kill_at = 0;
	int term_sent = 0, done = 0;
	ssize_t n;
	pid_t pid;

	if (pipe2(errpipe, O_CLOEXEC) < 0)
		return NOT_RUN;
	if (r->out_fd < 0 && pipe2(outpipe, O_CLOEXEC) < 0) {
		close(errpipe[0]);
		close(errpipe[1]);
		return NOT_RUN;
	}
	pid = fork();
	if (pid < 0) {
		RUN_ERROR(r, "%s: %s: fork: %m", PLUGIN, r->what);
		close(errpipe[0]);
		close(errpipe[1]);
		if (outpipe[0] >= 0) {
			close(outpipe[0]);
			close(outpipe[1]);
		}
		return NOT_RUN;
	}
	if (pid == 0) {
		int fd = r->out_fd >= 0 ? r->out_fd : outpipe[1];
		int devnull = open("/dev/null", O_RDONLY);

		/* slurmstepd may die first (slurmd's PrologEpilogTimeout): take us along */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		signal(SIGPIPE, SIG_DFL);
		if (devnull >= 0)
			dup2(devnull, 0);
		if (dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			goto fail;
		if (r->uid != (uid_t) -1) {
			if (setgroups(r->ngids, r->gids) < 0 || setgid(r->gid) < 0 ||
			    setuid(r->uid) < 0)
				goto fail;
		}
		if (r->envp)
			execve(r->argv[0], r->argv, r->envp);
		else {
			char deadline[16];

			setenv("PATH", DEFAULT_PATH, 0); /* slurmd gives prologs no PATH */
			if (r->pass_deadline) {
				snprintf(deadline, sizeof(deadline), "%d", r->timeout_s);
				setenv(DEADLINE_VAR, deadline, 1);
			}
			execv(r->argv[0], r->argv);
		}
	fail:
		exec_errno = errno;
		n = write(errpipe[1], &exec_errno, sizeof(exec_errno));
		_exit(127);
	}
	close(errpipe[1]);
	if (outpipe[1] >= 0)
		close(outpipe[1]);

	/* Read EXEC's output (when captured) until EOF or the deadline, then reap it. */
	while (!done) {
		struct pollfd pfd = { outpipe[0], POLLIN, 0 };
		double left = (term_sent ? kill_at : deadline) - now_s();
		int ms = left > 0 ? (int) (left * 1000) + 1 : 0;

		if (outpipe[0] >= 0) {
			if (poll(&pfd, 1, ms > 200 ? 200 : ms) > 0) {
				n = read(outpipe[0], out + outlen, sizeof(out) - 1 - outlen);
				if (n > 0) {
					outlen += n;
					if (outlen >= sizeof(out) - 1) {
						log_output(r->what, out, outlen, 0);
						outlen = 0;
					}
				} else if (n == 0 || errno != EINTR) {
					close(outpipe[0]);
					outpipe[0] = -1;
				}
			}
		} else
			usleep((ms > 50 ? 50 : (ms > 0 ? ms : 1)) * 1000);

		if (waitpid(pid, &wstatus, WNOHANG) == pid)
			done = 1;
		else if (!term_sent && now_s() >= deadline) {
			/* SIGTERM first: gpu-healthcheck kills its probe children and leaves a
			 * TERMINATED history line; SIGKILL after a grace */
			RUN_ERROR(r, "%s: %s: %s passed its deadline of %d s; sending SIGTERM",
				    PLUGIN, r->what, r->argv[0], r->timeout_s);
			kill(pid, SIGTERM);
			term_sent = 1;
			kill_at = now_s() + 3;
		} else if (term_sent && now_s() >= kill_at) {
			kill(pid, SIGKILL);
			waitpid(pid, &wstatus, 0);
			done = 1;
		}
	}
	if (outpipe[0] >= 0) {
		/* EXEC may have left a child holding the pipe: take what is there, no more */
		fcntl(outpipe[0], F_SETFL, O_NONBLOCK);
		while ((n = read(outpipe[0], out + outlen, sizeof(out) - 1 - outlen)) > 0)
			outlen += n;
		close(outpipe[0]);
	}
	if (outlen)
		log_output(r->what, out, outlen,
			   !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0));

	n = read(errpipe[0], &exec_errno, sizeof(exec_errno));
	close(errpipe[0]);
	if (n == (ssize_t) sizeof(exec_errno)) {
		RUN_ERROR(r, "%s: %s: cannot run %s: %s; job not checked (a problem of "
			    "gpu-healthcheck's installation, not of the node)",
			    PLUGIN, r->what, r->argv[0], strerror(exec_errno));
		return NOT_RUN;
	}
	if (term_sent)
		return TIMED_OUT;
	if (WIFSIGNALED(wstatus)) {
		RUN_ERROR(r, "%s: %s: %s killed by signal %d; job goes on (a bug of "
			    "gpu-healthcheck, not a node fault)",
			    PLUGIN, r->what, r->argv[0], WTERMSIG(wstatus));
		return CRASHED;
	}
	*status = WEXITSTATUS(wstatus);
	return RAN;
}

/* The prolog/epilog deadline: timeout=, else slurmd's timeout of this script less a margin,
 * so that gpu-healthcheck is stopped cleanly before slurmd kills the whole process group.
 * Slurm 25.05 has PrologTimeout and EpilogTimeout (each defaults to PrologEpilogTimeout,
 * which no longer has a field of its own: slurm.conf(5) of 26.05); before it, one
 * PrologEpilogTimeout for both. */
static int script_timeout(const char *mode)
{
	int t;

	if (conf.timeout_s)
		return conf.timeout_s;
	if (&slurm_conf == NULL)
		return UNBOUNDED_TIMEOUT_S;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 5, 0)
	t = !strcmp(mode, "prolog") ? slurm_conf.prolog_timeout : slurm_conf.epilog_timeout;
#else
	(void) mode;
	t = slurm_conf.prolog_epilog_timeout;
#endif
	if (t == 0 || t == (uint16_t) NO_VAL16)
		return UNBOUNDED_TIMEOUT_S;
	return t > 20 ? t - 5 : (t > 4 ? t - t / 4 : t);
}

/* prolog/epilog: EXEC's exit status is the answer; our own failures are not. */
static int run_script(const char *mode, const char *level)
{
	char arg_mode[16];
	char *argv[5] = { conf.exec, arg_mode, NULL, NULL, NULL };
	struct run r = { mode, argv, NULL, -1, (uid_t) -1, 0, NULL, 0, script_timeout(mode), 0, 1 };
	int status = 0;

	snprintf(arg_mode, sizeof(arg_mode), "--%s", mode);
	if (level) {
		argv[2] = "--level";
		argv[3] = (char *) level;
	}
	switch (run_exec(&r, &status)) {
	case RAN:
		if (status == 0)
			return 0;
		if (status == USAGE_EXIT) {
			/* our command line and the installed gpu-healthcheck disagree: our problem */
			slurm_error("%s: %s: %s refused its command line (exit %d); job goes on",
				    PLUGIN, mode, conf.exec, status);
			return 0;
		}
		slurm_error("%s: %s: %s exited %d: %s", PLUGIN, mode, conf.exec, status,
			    !strcmp(mode, "prolog") ? "the job must not start on this node"
						    : "it drained the node");
		return -1;
	case TIMED_OUT:
		slurm_error("%s: %s: %s stopped at its deadline; job goes on", PLUGIN, mode,
			    conf.exec);
		return 0;
	default:
		return 0;
	}
}

/* ------------------------------------------------------------------ the option */

static int opt_cb(int val, const char *optarg, int remote)
{
	const char *disabled;

	(void) val;
	if (!valid_ask(optarg)) {
		slurm_error("--gpu-healthcheck takes quick or full%s%s, not '%s'",
			    conf.allow_deep ? " or deep" : "", conf.allow_gang ? " or gang" : "",
			    optarg ? optarg : "");
		return -1;
	}
	disabled = ask_disabled(optarg);
	if (disabled) {
		slurm_error("--gpu-healthcheck=%s is disabled on this cluster (%s "
			    "in plugstack.conf); use --gpu-healthcheck=quick or leave it out",
			    optarg, disabled);
		return -1;
	}
	if (!remote)
		snprintf(requested, sizeof(requested), "%s", optarg);
	return 0;
}

/* ------------------------------------------------------------------ entry points */

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	if (parse_args(ac, av) == 0 && ctx == S_CTX_SLURMD) /* slurmd's log: what it will do */
		slurm_info("%s: exec=%s level=%s allow_full=%s run=%s%s%s timeout=%d s (epilog %d s) "
			   "allow_deep=%s allow_gang=%s", PLUGIN, conf.exec, conf.level,
			   conf.allow_full ? "yes" : "no", conf.run_prolog ? "prolog," : "",
			   conf.run_epilog ? "epilog," : "", conf.run_report ? "report" : "",
			   script_timeout("prolog"), script_timeout("epilog"),
			   conf.allow_deep ? "yes" : "no", conf.allow_gang ? "yes" : "no");
	if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE) {
		if (spank_option_register(sp, &level_option) != ESPANK_SUCCESS)
			slurm_error("%s: cannot register --gpu-healthcheck", PLUGIN);
	}
	if (ctx == S_CTX_REMOTE && (conf.run_report || conf.allow_gang) &&
	    socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fd_socks) < 0) {
		slurm_info("%s: socketpair: %m; no task-exit report for this step", PLUGIN);
		fd_socks[0] = fd_socks[1] = -1;
	}
	return 0;
}

/* sbatch/salloc/srun: the job's choice goes into the prolog's environment. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	(void) ac;
	(void) av;
	if ((ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR) && requested[0] && !is_gang(requested) &&
	    spank_job_control_setenv(sp, LEVEL_VAR, requested, 1) != ESPANK_SUCCESS)
		slurm_error("%s: cannot pass --gpu-healthcheck=%s to the prolog", PLUGIN, requested);
	return 0;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	char *opt = NULL;
	const char *level, *disabled;

	parse_args(ac, av);
	if (!conf.run_prolog)
		return 0;
	level = getenv("SPANK_" LEVEL_VAR);
	if (spank_option_getopt(sp, &level_option, &opt) == ESPANK_SUCCESS && opt)
		level = opt;
	/* checked again here: a user's own plugstack.conf (SLURM_CONF) can put any level into
	 * the job's prolog environment */
	if (!valid_ask(level) || is_gang(level))
		level = conf.level;
	else if ((disabled = ask_disabled(level))) {
		slurm_error("%s: prolog: the job asks for %s, disabled by %s; running %s",
			    PLUGIN, level, disabled, conf.level);
		level = conf.level;
	}
	return run_script("prolog", level);
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	(void) sp;
	parse_args(ac, av);
	return conf.run_epilog ? run_script("epilog", NULL) : 0;
}

/* Whether a NAME=VALUE of the job's environment goes into a report's: what names the job, its
 * node and its GPUs, never what changes how a program runs (LD_PRELOAD, LD_LIBRARY_PATH,
 * PYTHONPATH, PYTHONHOME, the job's PATH): the report is our Python, not the job's. */
static int report_keeps(const char *entry)
{
	static const char *const names[] = { "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HOME",
					     "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", NULL };
	size_t len = strcspn(entry, "=");
	int i;

	if (!strncmp(entry, "SLURM_", 6) || !strncmp(entry, "SLURMD_", 7))
		return entry[len] == '=';
	for (i = 0; names[i]; i++)
		if (len == strlen(names[i]) && !strncmp(entry, names[i], len) && entry[len] == '=')
			return 1;
	return 0;
}

/* A report's environment: the job's entries report_keeps() takes, our PATH, slurmd's
 * GPU_HEALTHCHECK_CONFIG (if set) and `phase` (GPU_HEALTHCHECK_REPORT=...).  free() the
 * array, not its strings. */
static char **report_envp(char **env, char *phase)
{
	static char path[] = "PATH=" DEFAULT_PATH;
	static char config[PATH_MAX + sizeof(CONFIG_VAR) + 1];
	const char *own = getenv(CONFIG_VAR);
	int n = 0, k = 0;
	char **envp;

	while (env[n])
		n++;
	envp = calloc(n + 4, sizeof(char *));
	if (!envp)
		return NULL;
	for (n = 0; env[n]; n++)
		if (report_keeps(env[n]))
			envp[k++] = env[n];
	envp[k++] = path;
	envp[k++] = phase;
	if (own && strlen(own) < PATH_MAX) {
		snprintf(config, sizeof(config), "%s=%s", CONFIG_VAR, own);
		envp[k++] = config;
	}
	return envp;
}

/* The gang check's privileged side: EXEC --gang --act as root, with slurmstepd's own
 * environment (never the job's: a user's PATH or PYTHONPATH must not reach root) and
 * SLURM_JOB_ID from slurmstepd's S_JOB_ID.  Its lines go to out_fd, the job's output.
 * Returns EXEC's exit status (2: the fabric failed), or -1 when it did not run to one. */
static int run_gang(spank_t sp, int out_fd)
{
	extern char **environ;
	static char path[] = "PATH=" DEFAULT_PATH;
	char *argv[] = { conf.exec, "--gang", "--act", NULL };
	char job[32], node[128] = "", **envp, **jobenv = NULL;
	uint32_t job_id = 0;
	int n = 0, k = 0, status = 0, has_path = 0, has_node = 0;

	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || job_id == 0)
		return -1;
	snprintf(job, sizeof(job), "SLURM_JOB_ID=%u", job_id);
	/* this node's name, which slurmstepd itself puts into every task's environment (names
	 * only which node's config and logs these are; nothing is judged by it) */
	if (spank_get_item(sp, S_JOB_ENV, &jobenv) == ESPANK_SUCCESS && jobenv)
		for (n = 0; jobenv[n]; n++)
			if (!strncmp(jobenv[n], "SLURMD_NODENAME=", 16) &&
			    strlen(jobenv[n]) < sizeof(node) &&
			    strspn(jobenv[n] + 16, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						   "0123456789._-") == strlen(jobenv[n] + 16))
				snprintf(node, sizeof(node), "%s", jobenv[n]);
	n = 0;
	while (environ[n])
		n++;
	envp = calloc(n + 4, sizeof(char *));
	if (!envp)
		return -1;
	for (n = 0; environ[n]; n++) {
		if (!strncmp(environ[n], "SLURM_JOB_ID=", 13) || !strncmp(environ[n], "SLURM_PROCID=", 13))
			continue;
		if (!strncmp(environ[n], "PATH=", 5))
			has_path = 1;
		if (!strncmp(environ[n], "SLURMD_NODENAME=", 16))
			has_node = 1;
		envp[k++] = environ[n];
	}
	envp[k++] = job;
	if (!has_node && node[0])
		envp[k++] = node;
	if (!has_path)
		envp[k++] = path;
	{
		struct run r = { "gang", argv, envp, out_fd, (uid_t) -1, 0, NULL, 0,
				 GANG_TIMEOUT_S, 1, 0 };

		if (run_exec(&r, &status) != RAN)
			status = -1;
	}
	free(envp);
	return status;
}

/* Is this task `gpu-healthcheck --gang` (argv[0] named gpu-healthcheck)?  Only a trigger: the
 * privileged side believes nothing the task says, it measures again. */
static int gang_task(spank_t sp)
{
	int argc = 0, i;
	char **argv = NULL;
	const char *base;

	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 2 || !argv)
		return 0;
	base = strrchr(argv[0], '/');
	base = base ? base + 1 : argv[0];
	if (strcmp(base, "gpu-healthcheck"))
		return 0;
	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--gang"))
			return 1;
	return 0;
}

/* The batch script's task, before it becomes the user: a job that asked --gpu-healthcheck=gang
 * has its nodes checked by root before the script runs. */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	uint32_t step = 0, global = 1;
	char *opt = NULL;

	(void) ac;
	(void) av;
	if (!conf.allow_gang ||
	    spank_option_getopt(sp, &level_option, &opt) != ESPANK_SUCCESS || !is_gang(opt))
		return 0;
	if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || step != SLURM_BATCH_SCRIPT ||
	    spank_get_item(sp, S_TASK_GLOBAL_ID, &global) != ESPANK_SUCCESS || global != 0)
		return 0;
	if (run_gang(sp, STDERR_FILENO) != 2)
		return 0;
	/* The fabric failed.  Where the privileged side drained the bad node it has already
	 * requeued the job, and the requeue's kill ends the script as it ends any running job.
	 * This task must not end itself here: a task that dies, fails or waits inside this call
	 * leaves slurmstepd unable to finish the step, and slurmctld then drains the healthy
	 * batch node "Kill task failed" (seen on 22.05 with a wait, on 24.11 with SIGKILL too).
	 * So the script may start for the moment the requeue's kill takes to arrive. */
	return 0;
}

/* A task of ours (the task's child, as the user, its stdio in place): hand its stderr to
 * slurmstepd for the exit report, and tell the first task of a requeued batch job why. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	uint32_t task = 0, global = 1, step = 0, restarts = 0;
	char **env = NULL;

	(void) ac;
	(void) av;
	if (fd_socks[1] < 0)
		return 0;
	if (spank_get_item(sp, S_TASK_ID, &task) == ESPANK_SUCCESS) {
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = { &task, sizeof(task) };
		struct msghdr msg = { 0 };
		struct cmsghdr *cmsg;
		int fd = STDERR_FILENO;

		memset(cbuf, 0, sizeof(cbuf));
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		cmsg = CMSG_FIRSTHDR(&msg);
		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
		if (sendmsg(fd_socks[1], &msg, MSG_DONTWAIT) < 0)
			slurm_info("%s: task %u: cannot pass stderr for the exit report: %m",
				    PLUGIN, task);
	}
	if (!conf.run_report)
		return 0;
	/* Slurm 22.05 never fills S_SLURM_RESTART_COUNT in (stepd's restart_cnt stays 0); the
	 * task's environment has it */
	if (spank_get_item(sp, S_SLURM_RESTART_COUNT, &restarts) != ESPANK_SUCCESS ||
	    restarts == 0) {
		char buf[16];

		if (spank_getenv(sp, "SLURM_RESTART_COUNT", buf, sizeof(buf)) == ESPANK_SUCCESS)
			restarts = (uint32_t) strtoul(buf, NULL, 10);
	}
	if (restarts > 0 &&
	    spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS &&
	    step == SLURM_BATCH_SCRIPT &&
	    spank_get_item(sp, S_TASK_GLOBAL_ID, &global) == ESPANK_SUCCESS && global == 0 &&
	    spank_get_item(sp, S_JOB_ENV, &env) == ESPANK_SUCCESS) {
		char *argv[] = { conf.exec, "--job-report", NULL };
		struct run r = { "job-report", argv, NULL, STDERR_FILENO, (uid_t) -1, 0, NULL, 0,
				 REPORT_TIMEOUT_S, 1, 0 };
		int status;

		r.envp = report_envp(env, "GPU_HEALTHCHECK_REPORT=requeued");
		if (r.envp)
			run_exec(&r, &status);
		free(r.envp);
	}
	return 0;
}

/* slurmstepd: collect the stderr descriptors the tasks have sent so far. */
static void collect_task_fds(void)
{
	for (;;) {
		uint32_t task = 0;
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = { &task, sizeof(task) };
		struct msghdr msg = { 0 };
		struct cmsghdr *cmsg;
		int fd;

		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		if (recvmsg(fd_socks[0], &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0)
			return;
		cmsg = CMSG_FIRSTHDR(&msg);
		if (!cmsg || cmsg->cmsg_type != SCM_RIGHTS)
			continue;
		memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
		if (task < MAX_TASKS && !task_stderr[task])
			task_stderr[task] = fd + 1;
		else
			close(fd);
	}
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	uint32_t task = 0;
	int wstatus = 0, fd, status = 0, ngids = 0;
	uid_t uid;
	gid_t gid, *gids = NULL;
	char **env = NULL, **envp;
	char *argv[] = { conf.exec, "--job-report", NULL };

	(void) ac;
	(void) av;
	if (conf.allow_gang && spank_get_item(sp, S_TASK_EXIT_STATUS, &wstatus) == ESPANK_SUCCESS &&
	    WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 2 && gang_task(sp)) {
		uint32_t global = 1;

		if (spank_get_item(sp, S_TASK_GLOBAL_ID, &global) == ESPANK_SUCCESS && global == 0) {
			int out = -1;

			if (fd_socks[0] >= 0) {
				collect_task_fds();
				if (spank_get_item(sp, S_TASK_ID, &task) == ESPANK_SUCCESS &&
				    task < MAX_TASKS && task_stderr[task]) {
					out = task_stderr[task] - 1;
					task_stderr[task] = 0;
				}
			}
			reported = 1; /* the gang's lines are this step's report */
			run_gang(sp, out);
			if (out >= 0)
				close(out);
			return 0;
		}
	}
	if (!conf.run_report || fd_socks[0] < 0)
		return 0;
	collect_task_fds();
	if (spank_get_item(sp, S_TASK_ID, &task) != ESPANK_SUCCESS || task >= MAX_TASKS ||
	    !task_stderr[task])
		return 0;
	fd = task_stderr[task] - 1;
	task_stderr[task] = 0;
	if (reported || spank_get_item(sp, S_TASK_EXIT_STATUS, &wstatus) != ESPANK_SUCCESS ||
	    (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
		/* a task that succeeds pays nothing; nor does one failing after the first: the
		 * report is about the node's GPUs, the same for every task of the step, and each
		 * would hold the step (~0.16 s) */
		close(fd);
		return 0;
	}
	reported = 1;
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS) {
		close(fd);
		return 0;
	}
	if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &ngids) != ESPANK_SUCCESS) {
		gids = &gid;
		ngids = 1;
	}
	envp = report_envp(env, "GPU_HEALTHCHECK_REPORT=task-exit");
	if (!envp) {
		close(fd);
		return 0;
	}
	{
		struct run r = { "job-report", argv, envp, fd, uid, gid, gids, ngids,
				 REPORT_TIMEOUT_S, 1, 0 };
		run_exec(&r, &status); /* read-only: its result changes nothing */
	}
	free(envp);
	close(fd);
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	int i;

	(void) sp;
	(void) ac;
	(void) av;
	for (i = 0; i < MAX_TASKS; i++)
		if (task_stderr[i]) {
			close(task_stderr[i] - 1);
			task_stderr[i] = 0;
		}
	for (i = 0; i < 2; i++)
		if (fd_socks[i] >= 0) {
			close(fd_socks[i]);
			fd_socks[i] = -1;
		}
	return 0;
}
