"""Warden as a Model Context Protocol server: `warden mcp` (stdio) and `/mcp` in `warden serve`.

- `tools`: the tools' names, JSON Schemas and descriptions for a model, and the argument check;
- `calls`: each tool call authenticated and carried out through the bot-request service, one audit
  event each (workspaces, commands, processes);
- `files`: the file tools, through the caller's file service;
- `texts`: refusals and waiting approvals worded for a model (folders, never zones);
- `server`: the `mcp` SDK's low-level server over stdio, and its streamable-HTTP app at `/mcp`.
"""
