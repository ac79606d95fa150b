import { writeFile } from 'node:fs/promises';
import { loadConfig } from '../contracts/config.ts';
import { catalogTools, registryServerJson } from '../services/api/discovery/catalog.ts';
import { signalToolTable } from '../services/api/mcp/tool-registry.ts';
import { paidTools } from '../services/api/x402/tools.ts';

// Regenerates server.json (the MCP registry entry) from the tool table: `npx tsx scripts/write-server-json.ts`.
const tools = catalogTools(signalToolTable(), paidTools(loadConfig({})));
await writeFile(
  new URL('../server.json', import.meta.url),
  `${JSON.stringify(registryServerJson(tools), null, 2)}\n`,
);
