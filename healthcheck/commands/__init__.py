"""One module per command-line mode (pip's commands/, gpud's cmd/): cli.py parses and
dispatches, each module here reads, decides and prints for its mode."""
