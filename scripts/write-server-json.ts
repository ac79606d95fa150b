import { writeFile } from 'node:fs/promises';
import { loadConfig } from '../contracts/config.ts';
import { catalogTools, registryServerJson } from '../services/api/discovery/catalog.ts';
import { signalToolTable } from '../services/api/mcp/tool-registry.ts';
import { knowledgeTools } from '../services/knowledge/tools.ts';
import { paidTools } from '../services/payments/tools.ts';

// Regenerates server.json (the MCP registry entry) from the tool table: `npx tsx scripts/write-server-json.ts`.
// Every tool the api role serves over MCP: the signal tools and the knowledge tools (only their
// definitions are read here, so they get no index to run against).
const definitionsOnly = () => Promise.reject(new Error('definitions only'));
const tools = catalogTools(
  [...signalToolTable(), ...knowledgeTools(definitionsOnly, [])],
  paidTools(loadConfig({})),
);
await writeFile(
  new URL('../server.json', import.meta.url),
  `${JSON.stringify(registryServerJson(tools), null, 2)}\n`,
);
