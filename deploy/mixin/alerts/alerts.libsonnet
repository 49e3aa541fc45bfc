// gpu-healthcheck's alerts.  Every alert's runbook_url is its anchor in docs/runbook.md (the
// alert's name in lower case), which tests/cli/test_mixin.py checks.
{
  local c = $._config,
  local s = $.sel,
  local cl = c.clusterLabel,
  // '30m' -> '30 minutes', '1h' -> 'an hour', '6h' -> '6 hours' (the summaries' words)
  local human(d) =
    local n = std.parseInt(std.substr(d, 0, std.length(d) - 1));
    local unit = d[std.length(d) - 1];
    if unit == 'm' then '%d minutes' % n
    else if unit == 'h' then (if n == 1 then 'an hour' else '%d hours' % n)
    else d,
  local alert(name, expr, severity, summary, description, forTime=null) = {
    alert: name,
    expr: expr,
    labels: { severity: severity },
    annotations: {
      summary: summary,
      description: description,
      runbook_url: c.runbookURLPattern % std.asciiLower(name),
    },
  } + (if forTime != null then { 'for': forTime } else {}),

  prometheusAlerts+:: {
    groups+: [
      {
        name: 'gpu-healthcheck-repair',
        rules: [
          // A reset runs and is validated within one run, a reboot within one boot: a node that
          // is still resetting, rebooting or validating this long is stuck (a RebootProgram that
          // never came back, a run killed in the middle of a repair).
          alert('GpuHealthcheckRepairStuck',
                'gpu_healthcheck_repair_state%s == 1' % s('state=~"resetting|rebooting|validating"'),
                'warning',
                '{{ $labels.instance }}: repair {{ $labels.state }} for over %s' % human(c.repairStuckFor),
                "gpu-healthcheck's repair of this node has been {{ $labels.state }} for %s or more; the node stays drained. See its journal (GPU_HEALTHCHECK_EVENT=repair) and `gpu-healthcheck --cluster`." % human(c.repairStuckFor),
                c.repairStuckFor),
          // A reboot slurmctld gave up on (no registration within ResumeTimeout): the node is
          // DOWN and gpu-healthcheck never touches it again; a person must look at it.
          alert('GpuHealthcheckRebootTimedOut',
                'gpu_healthcheck_repair_state%s == 1' % s('state="reboot_timed_out"'),
                'critical',
                '{{ $labels.instance }}: the repair reboot never came back',
                'gpu-healthcheck asked Slurm to reboot this node and slurmctld timed the reboot out (ResumeTimeout); the node is left for a person: check its console or BMC, then resume it by hand.'),
          // Nodes waiting hours for the repair budget: repair.max_concurrent is too small for
          // the cluster's failure rate, or a claim was left behind.
          alert('GpuHealthcheckRepairWaitingForBudget',
                'gpu_healthcheck_repair_state%s == 1' % s('state="waiting_for_budget"'),
                'info',
                '{{ $labels.instance }}: drained, waiting %s for the repair budget' % human(c.repairWaitingForBudgetFor),
                "Other nodes' repair claims fill repair.max_concurrent; `gpu-healthcheck --cluster` shows which.",
                c.repairWaitingForBudgetFor),
          // A GPU marked for RMA: a person must replace it (the node is never resumed
          // automatically).  The counter's increase fires for a day after the mark.
          alert('GpuHealthcheckGpuMarkedRma',
                'increase(gpu_healthcheck_gpus_marked_rma_total%s[1d]) > 0' % s(),
                'critical',
                '{{ $labels.instance }}: a GPU was marked for RMA',
                'gpu-healthcheck marked a GPU of this node for RMA (repair.max_attempts repairs within repair.window_s). The drain reason names the GPU, PCI bus and serial; the evidence is in state_dir/evidence/.'),
          // One GPU repaired again and again within repair.window_s (its ledger): it will be
          // marked for RMA at repair.max_attempts; with a high max_attempts this is the early
          // warning.
          alert('GpuHealthcheckGpuRepeatedRepairs',
                'gpu_healthcheck_gpu_repairs%s >= %d' % [s(), c.gpuRepeatedRepairs],
                'warning',
                '{{ $labels.instance }}: GPU {{ $labels.gpu }} (serial {{ $labels.serial }}) repaired {{ $value }} times within repair.window_s',
                'The GPU at {{ $labels.pci_bus_id }} keeps needing a reset or a reboot.'),
          // One node repaired three times in a day, whichever GPUs: a board, riser or power
          // fault the per-GPU ledger does not see.
          alert('GpuHealthcheckNodeRepeatedRepairs',
                '(increase(gpu_healthcheck_repairs_attempted_reset_total%s[1d])\n + increase(gpu_healthcheck_repairs_attempted_reboot_total%s[1d])) >= %d\n'
                % [s(), s(), c.nodeRepeatedRepairsPerDay],
                'warning',
                '{{ $labels.instance }}: {{ $value }} repairs in a day',
                'gpu-healthcheck reset or rebooted this node %d or more times within 24 hours.' % c.nodeRepeatedRepairsPerDay),
          // A repair that did not work: nvidia-smi refused the reset (a process holds the GPU),
          // or the full check after the repair still fails.  The node stays drained.
          alert('GpuHealthcheckRepairFailed',
                'increase(gpu_healthcheck_repairs_failed_total%s[1h]) > 0' % s(),
                'warning',
                '{{ $labels.instance }}: a {{ $labels.action }} did not work ({{ $labels.outcome }})',
                "The node stays drained; its journal has nvidia-smi's message or the finding that still fails."),
          // A reset that could not run: a process holds the GPU (nv-hostengine, ...) or
          // nvidia-smi is not at its path.  It is no attempt and is tried again at every check,
          // so a node blocked this long needs a person: the journal names what holds the GPU.
          alert('GpuHealthcheckRepairBlocked',
                'gpu_healthcheck_repair_state%s == 1' % s('state="blocked"'),
                'warning',
                '{{ $labels.instance }}: repair blocked for %s' % human(c.repairBlockedFor),
                'No reset could run: its journal entry (GPU_HEALTHCHECK_REPAIR_HELD_BY) names what holds the GPU, or nvidia-smi is missing.',
                c.repairBlockedFor),
        ],
      },
      {
        name: 'gpu-healthcheck-reporting',
        rules: [
          // The HealthCheckProgram (or the systemd timer) stopped writing the textfile: the
          // checker is not running, cannot write metrics_file, or the node is down.
          alert('GpuHealthcheckNotReporting',
                'time() - gpu_healthcheck_last_run_timestamp_seconds%s > %d' % [s('mode="node"'), c.notReportingSeconds],
                'warning',
                '{{ $labels.instance }}: no gpu-healthcheck --node run for over %d minutes' % (c.notReportingSeconds / 60),
                "The textfile's last --node run is {{ $value | humanizeDuration }} old: check HealthCheckProgram / the gpu-healthcheck timer, metrics_file, and node_exporter's textfile directory.",
                '5m'),
          // A config file the tool refuses (not root's, or writable by others): every run
          // falls back to the built-in defaults with report_only forced on, so nothing is
          // drained, resumed or repaired until a person fixes the file.
          alert('GpuHealthcheckConfigRefused',
                'gpu_healthcheck_config_refused%s == 1' % s(),
                'critical',
                '{{ $labels.instance }}: gpu-healthcheck refuses its config file',
                'The config is not owned by root or is writable by others: the checks run with built-in defaults and nothing is drained, resumed or repaired. Fix it (chown root:root; chmod 0644, 0640 or 0600); the journal and `gpu-healthcheck --check-config` name the file.',
                '5m'),
        ],
      },
      {
        name: 'gpu-healthcheck-suspects',
        rules: [
          // --suspects (on the admin host) has named this node, from Slurm's accounting or
          // our own history, for a while: statistics never drain a node, a person looks.
          alert('GpuHealthcheckSuspectNode',
                'max by (%s, node, kind) (gpu_healthcheck_suspect%s) == 1\n' % [cl, s()],
                'warning',
                '{{ $labels.node }}: suspect ({{ $labels.kind }}) for over %s' % human(c.suspectFor),
                "gpu-healthcheck --suspects has named this node ({{ $labels.kind }}) in its last runs for %s or more; it stays in service. `gpu-healthcheck --suspects` on the admin host prints the evidence (jobs, rates, score); run the deep level on it or drain it yourself." % human(c.suspectFor),
                c.suspectFor),
        ],
      },
      {
        name: 'gpu-healthcheck-trends',
        rules: [
          // At the last window's rate, the GPU's corrected ECC errors since the driver loaded
          // cross the ecc.volatile_corrected check's limit within the horizon: the node will
          // be drained then, so plan the reset now (the counter starts again at driver load).
          alert('GpuHealthcheckCorrectableErrorsRising',
                '(predict_linear(gpu_healthcheck_gpu_ecc_errors_total%s[%s], %d) > %d)\nunless gpu_healthcheck_gpu_ecc_errors_total%s > %d\n'
                % [s('counter="volatile", type="corrected"'), c.correctableTrendWindow, c.correctableTrendHorizonSeconds,
                   c.correctableErrorsLimit, s('counter="volatile", type="corrected"'), c.correctableErrorsLimit],
                'warning',
                '{{ $labels.instance }}: GPU {{ $labels.gpu }} will pass %d corrected ECC errors within %s' % [c.correctableErrorsLimit, std.toString(c.correctableTrendHorizonSeconds / 3600) + ' h'],
                'At the rate of the last %s the GPU at {{ $labels.pci_bus_id }} (serial {{ $labels.serial }}) reaches thresholds.ecc_volatile_corrected, and gpu-healthcheck will drain it then: reset it in a quiet hour, or watch for an uncorrectable error.' % c.correctableTrendWindow,
                c.correctableTrendFor),
          // Row-remap headroom: at the last window's rate, another memory bank of the GPU is
          // down to its last spare rows (low), or has none left, within the horizon.  A bank with none
          // left turns its next uncorrectable error into a remap failure, NVIDIA's RMA criterion.
          alert('GpuHealthcheckRemapHeadroomFalling',
                'predict_linear(gpu_healthcheck_gpu_remap_banks%s[%s], %d)\n  - gpu_healthcheck_gpu_remap_banks%s >= 1\n'
                % [s('availability=~"low|none"'), c.remapTrendWindow, c.remapTrendHorizonSeconds, s('availability=~"low|none"')],
                'warning',
                '{{ $labels.instance }}: GPU {{ $labels.gpu }} is running out of spare memory rows',
                'At the rate of the last %s, more memory banks of the GPU at {{ $labels.pci_bus_id }} (serial {{ $labels.serial }}) reach low or no row-remap availability within %d days; plan its replacement before a remap fails.' % [c.remapTrendWindow, c.remapTrendHorizonSeconds / 86400]),
        ],
      },
    ],
  },
}
