/**
 * Preloaded into a service process a test starts (NODE_OPTIONS=--import): a fetch to any https://
 * address goes to VENUES_AT (http://127.0.0.1:<port>) instead, path kept. At start the only such
 * fetches are FEED=auto's asks whether a live venue's API answers, so the probe meets the test's
 * server, not a network the machine may lack (offline, every ask fails at once).
 */
const at = process.env.VENUES_AT;
if (at) {
  const fetched = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    return url.protocol === 'https:' ? fetched(new URL(url.pathname, at), init) : fetched(input, init);
  };
}
