"""The commands: one module per mode of `gpu-healthcheck` (cli.py's dispatch table names them).

Each holds its mode's run: it takes the parsed arguments and the loaded config from cli.py and
calls into the rooms (read, checks, decide, act, report) in order; cli.py keeps the argument
parsing, the one config-error mapping and the one SIGTERM/crash guard."""
