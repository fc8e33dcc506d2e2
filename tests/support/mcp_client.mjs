// A small agent on the TypeScript MCP SDK (@modelcontextprotocol/sdk), for tests: connects over
// stdio (spawning `python -m warden mcp`) or streamable HTTP (Bearer token), lists the tools, runs
// a short session and prints what it saw as one JSON document.
// Usage: node mcp_client.mjs stdio PYTHON WORKSPACE   (token in WARDEN_TOKEN)
//        node mcp_client.mjs http URL WORKSPACE        (token in WARDEN_TOKEN)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, workspace] = process.argv.slice(2);
const token = process.env.WARDEN_TOKEN;
const transport = mode === "http"
  ? new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${token}` } } })
  : new StdioClientTransport({ command: target, args: ["-m", "warden", "mcp"], env: process.env, stderr: "inherit" });
const client = new Client({ name: "warden-ts-test", version: "1.0.0" });
await client.connect(transport);

const events = [];
const tools = await client.listTools();
const text = (result) => result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
const call = async (name, args, options) => {
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  return { isError: !!result.isError, text: text(result), structured: result.structuredContent ?? null };
};
const wrote = await call("write_file", { workspace, path: "/drafts/ts.txt", content: "from typescript\n" });
const read = await call("read_file", { workspace, path: "/drafts/ts.txt" });
const exec = await call("exec", { workspace, cmd: ["sh", "-c", "echo first; sleep 1.5; echo second"] }, {
  onprogress: (p) => events.push({ kind: "progress", at: Date.now(), message: p.message ?? "" }),
  resetTimeoutOnProgress: true,
});
events.push({ kind: "result", at: Date.now(), message: exec.text });
const refused = await call("read_file", { workspace: "vault", path: "/secret.txt" });
let invalid;
try {
  invalid = await call("exec", { workspace });  // cmd missing: the server says what is wrong
} catch (error) {
  invalid = { isError: true, text: String(error) };
}
console.log(JSON.stringify({ tools: tools.tools.map((t) => t.name), schema: tools.tools.find((t) => t.name === "exec").inputSchema,
                             wrote, read, exec, refused, invalid, events }));
await client.close();
