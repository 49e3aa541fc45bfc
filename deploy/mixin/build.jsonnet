// Every generated file of the mixin, by name, as the value it holds: deploy/mixin/build.py
// writes each out as std.manifestYamlDoc(value, quote_keys=false) (.yaml) or
// std.manifestJsonEx(value, '  ') (.json) would, byte for byte.
local mixin = import 'mixin.libsonnet';
{
  'prometheus_alerts.yaml': mixin.prometheusAlerts,
  'prometheus_rules.yaml': mixin.prometheusRules,
} + {
  ['dashboards_out/' + name]: mixin.grafanaDashboards[name]
  for name in std.objectFields(mixin.grafanaDashboards)
}
