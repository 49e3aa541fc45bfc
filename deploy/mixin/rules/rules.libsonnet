// Recording rules, named level:metric:operation as node-mixin's are.  `instance` rules keep one
// node's labels (instance, job, the cluster and hostname labels); `cluster` rules aggregate by
// the cluster label.  docs/observability.md lists them with what each answers.
{
  local c = $._config,
  local s = $.sel,
  local cl = c.clusterLabel,
  // the node's own labels: one node is one node_exporter target
  local node = 'instance, job',
  local record(name, expr) = { record: name, expr: expr },
  // label_replace(X, "key", "value", "", ""): the same series with a constant label added
  local tag(expr, key, value) = 'label_replace(%s, "%s", "%s", "", "")' % [expr, key, value],

  // the repair state classes of "out" (gpu_healthcheck_repair_state's states)
  outClasses:: [
    // our drain, not yet repaired: waiting for the jobs, the cooldown or the budget
    { reason: 'drain', states: 'drained|waiting_for_idle|cooldown|waiting_for_budget' },
    // the repair loop at work (a suspect's verification too), or stopped where a person must look
    { reason: 'repair', states: 'resetting|rebooting|validating|blocked|reboot_timed_out|verifying' },
    { reason: 'rma', states: 'rma' },
    // rebooted after a fabric drain, waiting for (or in) the next sweep's re-test
    { reason: 'fabric', states: 'fabric_retest|fabric_testing' },
  ],
  // the repair funnel's steps: (step, counter)
  funnel:: [
    ['reset_attempted', 'gpu_healthcheck_repairs_attempted_reset_total'],
    ['reset_succeeded', 'gpu_healthcheck_repairs_succeeded_reset_total'],
    ['reboot_attempted', 'gpu_healthcheck_repairs_attempted_reboot_total'],
    ['reboot_succeeded', 'gpu_healthcheck_repairs_succeeded_reboot_total'],
    ['rma', 'gpu_healthcheck_gpus_marked_rma_total'],
  ],
  // the node's own view: its last --node run and its repair state
  local own = |||
    max without (mode, verdict) (
      gpu_healthcheck_verdict%(pass)s
      and on (%(node)s) (time() - gpu_healthcheck_last_run_timestamp_seconds%(run)s < %(age)d)
      or on (%(node)s) (gpu_healthcheck_verdict%(pass)s * 0)
    )
    * on (%(node)s) group_left ()
    (1 - (max without (state) (gpu_healthcheck_repair_state%(out)s)
          or on (%(node)s) max without (mode, verdict) (gpu_healthcheck_verdict%(run)s * 0)))
  ||| % { pass: s('mode="node", verdict=~"pass|warn"'), run: s('mode="node"'), out: s('state!="in_service"'),
          node: node, age: c.healthyMaxAgeSeconds },
  // the last internode sweep's bad nodes, with the hostname label set to the sweep's node label
  sweepBad:: 'label_replace(gpu_healthcheck_fabric_sweep_node_outcome%s, "%s", "$1", "node", "(.+)")'
             % [s('outcome="bad"'), c.hostnameLabel],
  local succeeded(action) = tag('gpu_healthcheck_repairs_succeeded_%s_total%s' % [action, s()], 'action', action),

  prometheusRules+:: {
    groups+: [
      {
        name: 'gpu-healthcheck-health.rules',
        rules: [
          // 1 when the node's last --node run passed (or only warned), is recent, the node is
          // not out of service by the repair loop's state and the last internode sweep did not
          // find it bad; 0 otherwise.  The sweep drains a bad node from the submit host, so
          // the node's own textfile says nothing of it until the repair loop takes it: its
          // per-node outcome is joined on the hostname label (= the sweep's node label).
          record('instance:gpu_healthcheck_node_healthy:bool', |||
            (
            %(own)s)
            unless on (%(cl)s, %(host)s) %(bad)s
            or
            (
            %(own)s) * 0
          ||| % { own: own, cl: cl, host: c.hostnameLabel, bad: $.sweepBad }),
          // 1 per GPU that is not lost, has no remap or retirement pending or failed, on a
          // healthy node; 0 otherwise.
          record('instance_gpu:gpu_healthcheck_gpu_healthy:bool', |||
            (1 - max without () ({__name__=~"gpu_healthcheck_gpu_(lost|remap_pending|remap_failure|retired_pages_pending)"%(sel)s}))
            * on (%(node)s) group_left () instance:gpu_healthcheck_node_healthy:bool
          ||| % { sel: if c.gpuHealthcheckSelector == '' then '' else ', ' + c.gpuHealthcheckSelector, node: node }),
          record('%s:gpu_healthcheck_node_healthy:ratio' % cl,
                 'avg by (%s) (instance:gpu_healthcheck_node_healthy:bool)' % cl),
          record('%s:gpu_healthcheck_gpu_healthy:ratio' % cl,
                 'avg by (%s) (instance_gpu:gpu_healthcheck_gpu_healthy:bool)' % cl),
          record('%s:gpu_healthcheck_gpus:count' % cl,
                 'count by (%s) (instance_gpu:gpu_healthcheck_gpu_healthy:bool)' % cl),
          // the sum of the "low" and "none" banks of the row remapper's histogram, for the
          // headroom trend alert
          record('instance_gpu:gpu_healthcheck_gpu_remap_banks_low:sum',
                 'sum without (availability) (gpu_healthcheck_gpu_remap_banks%s)' % s('availability=~"low|none"')),
        ],
      },
      {
        name: 'gpu-healthcheck-out.rules',
        rules: [
          // 1 per node out of service, with its reason class (drain, repair, rma) and state
          record('instance:gpu_healthcheck_node_out:reason',
                 std.join('\nor\n', [
                   tag('gpu_healthcheck_repair_state%s == 1' % s('state=~"%s"' % o.states), 'reason', o.reason)
                   for o in $.outClasses
                 ]) + '\n'),
          // nodes out by reason class; the fabric class adds the last sweep's bad nodes (the
          // sweep drains them from the submit host: their own textfile does not know) that
          // the repair loop has not taken yet, so that each node counts once
          record('%s:gpu_healthcheck_nodes_out:sum' % cl, |||
            sum by (%(cl)s, reason) (
              instance:gpu_healthcheck_node_out:reason
              or
              (%(fabric)s
               unless on (%(cl)s, %(host)s) instance:gpu_healthcheck_node_out:reason)
            )
          ||| % { cl: cl, host: c.hostnameLabel,
                  fabric: tag('max by (%s, %s) (%s)' % [cl, c.hostnameLabel, $.sweepBad], 'reason', 'fabric') }),
        ],
      },
      {
        name: 'gpu-healthcheck-repair.rules',
        rules: [
          // mean seconds from drain to resume of the repairs that worked, per action
          record('%s:gpu_healthcheck_repair_drain_to_resume_seconds:mean' % cl, |||
            sum by (%(cl)s, action) (gpu_healthcheck_repair_drain_to_resume_seconds_total%(s)s)
            / on (%(cl)s, action)
            (sum by (%(cl)s, action) (%(ok)s) > 0)
          ||| % { cl: cl, s: s(), ok: succeeded('reset') + ' or ' + succeeded('reboot') }),
          // interruptions of the node (drains by gpu-healthcheck) within the window
          record('instance:gpu_healthcheck_interruptions:increase%s' % c.mtbiWindow,
                 'increase(gpu_healthcheck_drains_total%s[%s])' % [s(), c.mtbiWindow]),
          // mean time between interruptions per node: the window over its drains in it
          // (nodes without an interruption have none)
          record('instance:gpu_healthcheck_mtbi_seconds:%s' % c.mtbiWindow,
                 '%d / (instance:gpu_healthcheck_interruptions:increase%s > 0)' % [std.parseInt(std.substr(c.mtbiWindow, 0, std.length(c.mtbiWindow) - 1)) * 86400, c.mtbiWindow]),
          // the repair funnel: reset, then reboot, then RMA, by step; totals since the counters
          // began, and the last day's
          record('%s:gpu_healthcheck_repair_funnel:sum' % cl,
                 'sum by (%s, step) (\n%s\n)\n' % [cl, std.join('\nor\n', [tag('%s%s' % [f[1], s()], 'step', f[0]) for f in $.funnel])]),
          record('%s:gpu_healthcheck_repair_funnel:increase1d' % cl,
                 'sum by (%s, step) (\n%s\n)\n' % [cl, std.join('\nor\n', [tag('increase(%s%s[1d])' % [f[1], s()], 'step', f[0]) for f in $.funnel])]),
        ],
      },
      {
        name: 'gpu-healthcheck-suspects.rules',
        rules: [
          // the last --suspects run's suspects (the admin host's textfile) by rule; a node
          // (or GPU serial) counts once per rule, whichever admin hosts report it
          record('%s:gpu_healthcheck_suspects:count' % cl, |||
            count by (%(cl)s, kind) (
              max by (%(cl)s, node, kind, serial) (gpu_healthcheck_suspect%(s)s)
            )
          ||| % { cl: cl, s: s() }),
          // lemon nodes: those whose jobs fail more than their share (kind lemon) or that were
          // repaired too often (kind remediations, NVSentinel's rule); 0 once --suspects ran
          // and named none
          record('%s:gpu_healthcheck_lemons:count' % cl, |||
            count by (%(cl)s) (max by (%(cl)s, node) (gpu_healthcheck_suspect%(lemon)s))
            or
            max by (%(cl)s) (gpu_healthcheck_suspects_last_run_timestamp_seconds%(s)s * 0)
          ||| % { cl: cl, s: s(), lemon: s('kind=~"%s"' % c.lemonKinds) }),
        ],
      },
      {
        name: 'gpu-healthcheck-fabric.rules',
        rules: [
          // the internode sweep's median bus bandwidth per GPU model: each pair's figure (the
          // sweep's `node` label) joined with that node's gpu_healthcheck_gpu_info on the
          // hostname label
          record('%s:gpu_healthcheck_fabric_busbw_gbps:median' % cl, |||
            quantile by (%(cl)s, modelName) (0.5,
              label_replace(gpu_healthcheck_fabric_busbw_gbps%(s)s, "%(host)s", "$1", "node", "(.+)")
              * on (%(cl)s, %(host)s) group_left (modelName)
              topk by (%(cl)s, %(host)s) (1, max by (%(cl)s, %(host)s, modelName) (gpu_healthcheck_gpu_info%(s)s))
            )
          ||| % { cl: cl, host: c.hostnameLabel, s: s() }),
        ],
      },
    ],
  },
}
