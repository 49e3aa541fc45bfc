// A few builders for Grafana dashboard JSON (schemaVersion 39), written by hand: plain
// PromQL targets on the `datasource` variable, and the `cluster`, `hostname` and `gpu`
// variables every dashboard of the mixin has.
{
  ds:: { type: 'prometheus', uid: '${datasource}' },

  target(expr, legend='__auto', instant=false, format='time_series'):: {
    datasource: $.ds,
    expr: expr,
    legendFormat: legend,
    instant: instant,
    range: !instant,
    format: format,
    refId: 'A',
  },

  // a panel of `type` with its targets (refIds A, B, ...), `w` x `h` grid units
  panel(type, title, description, targets, w=12, h=8, unit='short', extra={}):: {
    type: type,
    title: title,
    description: description,
    datasource: $.ds,
    targets: [targets[i] { refId: std.char(65 + i) } for i in std.range(0, std.length(targets) - 1)],
    fieldConfig: { defaults: { unit: unit }, overrides: [] },
    options: {},
    w:: w,
    h:: h,
  } + extra,

  stat(title, description, targets, w=6, h=4, unit='short', thresholds=null)::
    $.panel('stat', title, description, targets, w, h, unit, {
      options: { reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
                 colorMode: 'background', graphMode: 'none', textMode: 'value_and_name' },
    } + (if thresholds != null then {
      fieldConfig+: { defaults+: { thresholds: { mode: 'absolute', steps: thresholds } } },
    } else {})),
  timeseries(title, description, targets, w=12, h=8, unit='short')::
    $.panel('timeseries', title, description, targets, w, h, unit, {
      options: { legend: { displayMode: 'table', placement: 'right', calcs: ['lastNotNull'] },
                 tooltip: { mode: 'multi', sort: 'desc' } },
    }),
  bargauge(title, description, targets, w=12, h=8, unit='short')::
    $.panel('bargauge', title, description, targets, w, h, unit, {
      options: { reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
                 orientation: 'horizontal', displayMode: 'basic', showUnfilled: true },
    }),
  table(title, description, targets, w=12, h=8, unit='short')::
    $.panel('table', title, description, [t { instant: true, range: false, format: 'table' } for t in targets],
            w, h, unit, { transformations: [{ id: 'merge', options: {} }],
                          options: { showHeader: true } }),

  // panels placed left to right, wrapping at Grafana's 24 columns
  layout(panels)::
    local place(acc, p) =
      local wrap = acc.x + p.w > 24;
      local x = if wrap then 0 else acc.x;
      local y = if wrap then acc.y + acc.rowH else acc.y;
      {
        x: x + p.w,
        y: y,
        rowH: if wrap then p.h else std.max(acc.rowH, p.h),
        out: acc.out + [p { id: std.length(acc.out) + 1, gridPos: { x: x, y: y, w: p.w, h: p.h } }],
      };
    std.foldl(place, panels, { x: 0, y: 0, rowH: 0, out: [] }).out,

  variable(name, label, query, multi=true, includeAll=true):: {
    name: name,
    label: label,
    type: 'query',
    datasource: $.ds,
    query: { query: query, refId: 'PrometheusVariableQueryEditor-VariableQuery' },
    definition: query,
    refresh: 2,
    sort: 1,
    multi: multi,
    includeAll: includeAll,
    allValue: '.*',
    current: { selected: true, text: ['All'], value: ['$__all'] },
  },

  // extra: variables of one dashboard after the four every dashboard has
  templating(cfg, extra=[]):: {
    list: [
      {
        name: 'datasource',
        label: 'Data source',
        type: 'datasource',
        query: 'prometheus',
        current: {},
        hide: 0,
        refresh: 1,
      },
      $.variable('cluster', 'Cluster',
                 'label_values(gpu_healthcheck_last_run_timestamp_seconds, %s)' % cfg.clusterLabel),
      $.variable('hostname', 'Host',
                 'label_values(gpu_healthcheck_last_run_timestamp_seconds{%s=~"$cluster"}, %s)'
                 % [cfg.clusterLabel, cfg.hostnameLabel]),
      $.variable('gpu', 'GPU',
                 'label_values(gpu_healthcheck_gpu_lost{%s=~"$cluster", %s=~"$hostname"}, gpu)'
                 % [cfg.clusterLabel, cfg.hostnameLabel]),
    ] + extra,
  },

  // dcgm-exporter's `hpc_job` label (the Slurm job ids the prolog writes into its job mapping
  // directory): the jobs on the chosen hosts' GPUs
  hpcJobVariable(cfg)::
    $.variable('hpc_job', 'Slurm job',
               'label_values(%s{%s}, hpc_job)'
               % [cfg.dcgmJobMetric, std.join(', ', std.filter(function(p) p != '', [
                 cfg.dcgmExporterSelector, '%s=~"$cluster"' % cfg.clusterLabel,
                 '%s=~"$hostname"' % cfg.hostnameLabel]))]),

  dashboard(cfg, uid, title, description, panels, annotations=[], variables=[]):: {
    uid: uid,
    title: title,
    description: description,
    tags: cfg.dashboardTags,
    timezone: 'utc',
    editable: true,
    graphTooltip: 1,
    refresh: cfg.dashboardRefresh,
    schemaVersion: 39,
    version: 1,
    time: { from: 'now-7d', to: 'now' },
    timepicker: {},
    templating: $.templating(cfg, variables),
    annotations: {
      list: [{
        builtIn: 1,
        datasource: { type: 'grafana', uid: '-- Grafana --' },
        enable: true,
        hide: true,
        iconColor: 'rgba(0, 211, 255, 1)',
        name: 'Annotations & Alerts',
        type: 'dashboard',
      }] + annotations,
    },
    links: [],
    panels: $.layout(panels),
  },
}
