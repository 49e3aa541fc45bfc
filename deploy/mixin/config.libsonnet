// The mixin's settings: override any of them in your own jsonnet,
//   (import 'gpu-healthcheck-mixin/mixin.libsonnet') + { _config+:: { gpuHealthcheckSelector: 'job="node"' } }
{
  _config+:: {
    // Selects the node_exporter scrapes that carry gpu-healthcheck's textfile; empty: any job.
    gpuHealthcheckSelector: '',
    // The label that names a cluster (a target label or an external label); the fleet rules and
    // dashboards aggregate by it.  A single cluster without it still works (one empty group).
    clusterLabel: 'cluster',
    // The label that names the node, as dcgm-exporter's `hostname` does: set it in the scrape
    // config (deploy/prometheus/README.md) so our series join with dcgm-exporter's and with the
    // internode sweep's `node` label.  The rules join one node's series on `instance`.
    hostnameLabel: 'hostname',

    // GpuHealthcheckNotReporting: seconds without a --node run (six 5-minute intervals).
    notReportingSeconds: 1800,
    // A node counts as healthy while its last --node run is this recent.
    healthyMaxAgeSeconds: 1800,
    repairStuckFor: '30m',
    repairWaitingForBudgetFor: '6h',
    repairBlockedFor: '1h',
    gpuRepeatedRepairs: 2,
    nodeRepeatedRepairsPerDay: 3,
    // Trend alerts (predict_linear): the window they learn the rate from, and how far ahead.
    correctableTrendWindow: '6h',
    correctableTrendHorizonSeconds: 86400,
    // and how long the forecast must hold before the alert fires (one window's rate is noisy)
    correctableTrendFor: '1h',
    // the ecc.volatile_corrected check's limit (thresholds.ecc_volatile_corrected)
    correctableErrorsLimit: 1000,
    remapTrendWindow: '7d',
    remapTrendHorizonSeconds: 30 * 86400,
    // Mean time between interruptions: the window the drains are counted over.
    mtbiWindow: '30d',
    // GpuHealthcheckSuspectNode: how long a node stays a suspect of --suspects before the
    // alert fires (the textfile keeps the last run's suspects until the next run).
    suspectFor: '6h',
    // The suspect kinds that make a lemon (cluster:gpu_healthcheck_lemons:count).
    lemonKinds: 'lemon|remediations',
    // Dashboards: how many repeat nodes the Fleet dashboard lists.
    topRepeatNodes: 10,
    // The dcgm-exporter series the Fleet dashboard's "Jobs on unhealthy GPUs" reads the
    // `hpc_job` label from (dcgm-exporter adds it to every series of a GPU that the prolog wrote
    // into its --hpc-job-mapping-dir: config hpc_job_mapping_dir); one its default counters have.
    dcgmJobMetric: 'DCGM_FI_DEV_GPU_TEMP',
    // and its selector (the job that scrapes dcgm-exporter); empty: any.
    dcgmExporterSelector: '',

    // Where each alert's runbook_url points: the anchor is the alert's name in lower case.
    runbookURLPattern: 'file:///usr/share/doc/gpu-healthcheck/docs/runbook.md#%s',
    dashboardTags: ['gpu-healthcheck'],
    dashboardRefresh: '1m',
  },

  // `gpu_healthcheck_x{<selector>,<extra>}`: the configured selector joined with a matcher.
  sel(extra='')::
    local parts = std.filter(function(p) p != '', [$._config.gpuHealthcheckSelector, extra]);
    if parts == [] then '' else '{' + std.join(', ', parts) + '}',
}
