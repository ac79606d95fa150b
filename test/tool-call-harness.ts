import { MemoryCache } from '../adapters/cache/memory.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { type ToolDefinition, toolRegistry } from '../services/api/mcp/tool-registry.ts';
import { KeyResolver } from '../services/keys/key-resolver.ts';
import { QuotaMeter } from '../services/metering/quota-meter.ts';

/**
 * What callTool needs, over in-process parts: the tools given, an empty key registry (the calls
 * are anonymous) and a quota meter of 1,000 calls a month on every plan. The meters are pushed
 * onto `meters` for the test to stop.
 */
export function toolCallDeps(tools: ToolDefinition[], meters: QuotaMeter[]) {
  const store = new MemoryEventStore();
  const limits = { monthly: 1_000, daily: null };
  const quota = new QuotaMeter({
    cache: new MemoryCache(),
    store,
    plans: { free: limits, starter: limits, pro: limits },
  });
  meters.push(quota);
  const keys = new KeyResolver({
    runner: {
      state: { byHash: {}, byId: {} },
      revision: 0,
      checkpoint: 0,
      running: true,
      error: null,
      waitFor: async () => {},
    },
    store,
  });
  return { registry: toolRegistry(tools), keys, quota, logger: undefined as never };
}
