import { MemoryCache } from '../adapters/cache/memory.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { type ToolDefinition, toolRegistry } from '../services/api/mcp/tool-registry.ts';
import { type Caller, credentialOf } from '../services/metering/caller.ts';
import { QuotaMeter } from '../services/metering/quota-meter.ts';

/**
 * What callTool needs, over in-process parts: the tools given and a quota meter of `monthly`
 * calls a month (1,000 unless told) on every plan. The meters are pushed onto `meters` for the
 * test to stop.
 */
export function toolCallDeps(tools: ToolDefinition[], meters: QuotaMeter[], monthly = 1_000) {
  const store = new MemoryEventStore();
  const limits = { monthly, daily: null };
  const quota = new QuotaMeter({
    cache: new MemoryCache(),
    store,
    plans: { free: limits, starter: limits, pro: limits },
  });
  meters.push(quota);
  return { registry: toolRegistry(tools), quota, logger: undefined as never };
}

/** The caller the caller hook makes of a request with no key from `clientAddress`. */
export function anonymousCaller(clientAddress: string): Caller {
  return credentialOf({ headers: {}, clientAddress }) as Caller;
}
