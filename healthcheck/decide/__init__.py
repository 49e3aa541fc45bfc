"""Pure decisions: verdict, drain reason, drain policy and budget, GPU mapping, exit codes."""
