// gpu-healthcheck's monitoring mixin (node-mixin's layout): alerts, recording rules and
// Grafana dashboards for the metrics in docs/observability.md.  `make mixin` renders them.
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
