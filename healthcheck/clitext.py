"""What `gpu-healthcheck --help` prints after the options, and the man page's EXIT STATUS and
NOTES (docs/make-manpage reads it from there): one place for every mode's exit status."""

EPILOG_TEXT = """\
exit status:
  --node          0 healthy, 1 warning, 2 failure (the node must not run jobs), 3 unknown
  --repair        as --node, for the check that follows the repair; 3 when slurmctld did
                  not answer (nothing repaired)
  --prolog        non-zero exactly when the job must not start on this node
  --epilog        non-zero exactly when it drained the node
  --check-config  0 valid, 3 invalid (every error, each naming the file and key; the
                  status --node has for the same file)
  --history, --cluster, --ack, --list-checks, --version   0 done, 3 could not
  --job-report    0 the job's GPUs are healthy, 2 one of them is at fault, 3 could not check
                  (also outside a job: no SLURM_JOB_ID)
  --internode-sweep  0 no bad node, 2 a bad node found (drained with --act), 3 could
                  not run
  --gang          0 the job's fabric passed (or one node: nothing to check), 2 it failed,
                  3 could not run (a program missing, srun refused, not in a job)
  --suspects      0 no suspect, 1 suspects found, 3 the accounting could not be read (the
                  history's suspects are still printed; --act then sends none to
                  verification), --act without `[suspects] act = true`, or --act could
                  not drain a suspect
  --replay-failures  0 done, 3 the file could not be read
  any mode        3 for a command-line mistake (an unknown option, an option the mode does
                  not take) or an invalid config under --node; 143 on SIGTERM
  refused config  (not owned by root, or writable by others) nothing is acted on in any
                  mode; --node, --repair, --check-config, --ack, --gang, --internode-sweep
                  exit 3, --prolog and --epilog 0

configuration: /etc/gpu-healthcheck/config.toml, or $GPU_HEALTHCHECK_CONFIG, or --config.
Slurm: Prolog=/usr/libexec/gpu-healthcheck/gpu-healthcheck-prolog; the Slurm guide is
/usr/share/doc/gpu-healthcheck/deploy/slurm/README.md.
documentation: /usr/share/doc/gpu-healthcheck/, which holds the docs/*.md named above
(the same paths in the source tree).
old names, still read (deprecated): --fabric-sweep is --internode-sweep; in the config,
[fabric] is [internode] and [suspects] fabric_retest is internode_retest
(docs/configuration.md#old-names).
a drained node, what now: /usr/share/doc/gpu-healthcheck/docs/runbook.md (each reason and alert).
"""
