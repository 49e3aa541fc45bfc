// Every generated file of the mixin, by name (deploy/mixin/build.py writes them).
local mixin = import 'mixin.libsonnet';
{
  'prometheus_alerts.yaml': std.manifestYamlDoc(mixin.prometheusAlerts, quote_keys=false),
  'prometheus_rules.yaml': std.manifestYamlDoc(mixin.prometheusRules, quote_keys=false),
} + {
  ['dashboards_out/' + name]: std.manifestJsonEx(mixin.grafanaDashboards[name], '  ') + '\n'
  for name in std.objectFields(mixin.grafanaDashboards)
}
