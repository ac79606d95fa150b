import type { FastifyPluginAsync } from 'fastify';
import { publicBaseUrl } from '../../contracts/config.ts';
import type { Projection } from '../../projections/projection.ts';
import type { Slice } from '../component.ts';
import { keyRegistryProjection } from '../keys/key-registry.ts';
import { quotaBalancesProjection } from '../metering/quota-projection.ts';
import { revealClock } from '../shared/reveal-clock.ts';
import { type DiscoveryOptions, discoveryPlugin } from './discovery/plugin.ts';
import { type KeyedChannelDeps, keyedChannel } from './plugins.ts';
import { verifyRoutes } from './verify/plugin.ts';

export type ChannelsSlice = Slice &
  Pick<ReturnType<typeof keyedChannel>, 'keys' | 'quota' | 'tools' | 'registry'>;

/**
 * The channels slice (api role): how callers reach every feature — request-rate limits, free
 * keys by sign-in, the MCP server over the one tool table, the public verify route and the
 * discovery documents. Its plugin goes first: the rate limit's hook must see every product
 * route registered after it.
 */
export function channelsSlice(
  deps: KeyedChannelDeps & {
    /** What discovery lists beside the MCP tools: the paid tools and rails (empty without x402). */
    discovery: Omit<DiscoveryOptions, 'tools'>;
    /** The market feed: /verify reveals on its clock (a replay's calls in feed time). */
    feed: { now(): number } | null;
  },
): ChannelsSlice {
  const keyed = keyedChannel(deps);
  const routes: FastifyPluginAsync[] = [
    ...keyed.plugins,
    verifyRoutes({
      store: deps.adapters.eventStore,
      baseUrl: publicBaseUrl(deps.config),
      now: revealClock(deps.feed),
    }),
    discoveryPlugin({ ...deps.discovery, tools: keyed.tools.all(), signin: keyed.oauth !== null }),
  ];
  const plugin: FastifyPluginAsync = async (app) => {
    // Who is calling, resolved once for every route after it; then the rate limit of that caller.
    await app.register(keyed.callers);
    if (keyed.rateLimit) await app.register(keyed.rateLimit);
    for (const route of routes) await app.register(route);
  };
  // Registered in the root context, so the rate limit's hook (itself root-level) covers the
  // routes of the slices registered after this one.
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return {
    name: 'keyed-channel',
    roles: ['api'],
    plugin,
    projections: [
      keyRegistryProjection as Projection<unknown>,
      quotaBalancesProjection as Projection<unknown>,
    ],
    processors: [],
    keys: keyed.keys,
    quota: keyed.quota,
    tools: keyed.tools,
    registry: keyed.registry,
    start: () => keyed.start(),
    stop: () => keyed.stop(),
    checks: () => keyed.checks?.() ?? {},
  };
}
