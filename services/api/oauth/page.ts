/**
 * The sign-in and consent page of an MCP host's authorization request, as HTML. Pure: what
 * to show comes in, the page goes out. The person signs in with an API key they hold (that key
 * is the one the host will act as) or with their wallet (then picks one of the wallet's keys).
 */
import { pagePolicy } from '../../shared/content-security-policy.ts';

export interface ConsentView {
  uid: string;
  clientName: string;
  clientId: string;
  redirectHost: string;
  /**
   * The redirect is an app's own scheme (`redirectHost` is that scheme and what follows it): the
   * page says an app on the device gets it, so a scheme with dots never reads as a web host.
   */
  redirectApp?: boolean;
  resource: string;
  /** A refusal of the last attempt, shown above the forms. */
  error?: string;
  /** The field the refusal is about (a key not accepted): marked invalid and described by it. */
  errorField?: 'api_key';
  /**
   * Where the flow ends, as a CSP source: the redirect_uri's origin, or an app's scheme (`cursor:`).
   * The forms post here, and the last post is redirected there: a browser that applies form-action
   * to that redirect must find it allowed. None: the forms may post to this service only.
   */
  redirectSource?: string;
  /** After a wallet sign-in: the wallet and its keys to choose from. */
  wallet?: { address: string; keys: { keyId: string; prefix: string; plan: string }[] };
}

const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const STYLE = `body{font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.4rem}fieldset{border:1px solid #ccc;border-radius:6px;margin:1.2rem 0;padding:1rem}
input[type=password],input[type=text]{width:100%;padding:.5rem;font:inherit;box-sizing:border-box}
button{font:inherit;padding:.5rem 1rem;margin-top:.6rem;cursor:pointer}.error{color:#a00;font-weight:600}
.muted{color:#555;font-size:.9rem}code{word-break:break-all}`;

/**
 * The wallet sign-in: a nonce from the interaction's own nonce path (a sign-in path: the sign-in
 * budget, not the anonymous product one), an EIP-4361 message signed in the wallet, posted back.
 * A refused nonce request is told in words: past the sign-in budget (429) when to try again.
 */
const walletScript = (
  nonceUrl: string,
) => `document.getElementById('wallet-button')?.addEventListener('click', async () => {
  const status = document.getElementById('wallet-status');
  try {
    if (!window.ethereum) throw new Error('no wallet found in this browser');
    const [address] = await window.ethereum.request({ method: 'eth_requestAccounts' });
    const chainId = parseInt(await window.ethereum.request({ method: 'eth_chainId' }), 16);
    const res = await fetch(${JSON.stringify(nonceUrl)}, { cache: 'no-store' });
    if (res.status === 429) {
      const wait = parseInt(res.headers.get('retry-after') || '', 10);
      throw new Error('Too many sign-in requests came from your network just now. Please try again in ' +
        (wait > 0 ? wait + ' seconds.' : 'a minute.'));
    }
    if (res.status === 400) throw new Error('This sign-in has expired. Start again from your MCP host.');
    if (!res.ok) throw new Error('Sign-in is unavailable right now (HTTP ' + res.status + '). Please try again shortly.');
    const nonce = await res.json();
    const message = nonce.domain + ' wants you to sign in with your Ethereum account:\\n' + address +
      '\\n\\nSign in to let an MCP host act as one of your API keys.\\n\\nURI: ' + location.origin +
      '\\nVersion: 1\\nChain ID: ' + chainId + '\\nNonce: ' + nonce.nonce + '\\nIssued At: ' + new Date().toISOString();
    const signature = await window.ethereum.request({ method: 'personal_sign', params: [message, address] });
    const form = document.getElementById('wallet-form');
    form.message.value = message;
    form.signature.value = signature;
    form.submit();
  } catch (err) {
    status.textContent = String(err && err.message || err);
  }
});`;

export function consentPage(view: ConsentView): string {
  const action = (step: string) => `/oauth/interaction/${encodeURIComponent(view.uid)}/${step}`;
  // A refusal comes on a new page load, where a screen reader does not announce role=alert: the
  // title says "Error:" first (read on load), and the focus starts on the field refused (which
  // reads out the refusal that describes it), else on the refusal itself.
  const onField = Boolean(view.error) && view.errorField === 'api_key';
  const error = view.error
    ? `<p class="error" id="consent-error" role="alert"${onField ? '' : ' tabindex="-1" autofocus'}>${escapeHtml(view.error)}</p>`
    : '';
  const keyInvalid = onField ? ' aria-invalid="true" aria-describedby="consent-error" autofocus' : '';
  const who = `<p><strong>${escapeHtml(view.clientName)}</strong> asks to call this service's MCP tools
 as one of your API keys: with that key's plan, quota and rate limits.</p>
<p class="muted">It will be sent back to ${view.redirectApp ? 'the app on this device that opens ' : ''}<code>${escapeHtml(view.redirectHost)}</code>${view.redirectApp ? ' links' : ''}.
Client: <code>${escapeHtml(view.clientId)}</code></p>`;
  const deny = `<form method="post" action="${action('abort')}"><button type="submit" id="deny">Deny</button></form>`;
  const body = view.wallet
    ? `<fieldset><legend>Choose the key the host will act as</legend>
<p class="muted">Signed in as <code>${escapeHtml(view.wallet.address)}</code></p>
<form method="post" action="${action('choose')}">
${view.wallet.keys
  .map(
    (k, i) =>
      `<label><input type="radio" name="key_id" value="${escapeHtml(k.keyId)}"${i === 0 ? ' checked' : ''}> <code>${escapeHtml(k.prefix)}…</code> (${escapeHtml(k.plan)})</label><br>`,
  )
  .join('\n')}
<button type="submit" id="choose">Allow</button></form></fieldset>`
    : `<fieldset><legend>Sign in with an API key you hold</legend>
<form method="post" action="${action('key')}">
<label for="api_key">API key (it is the key the host will act as)</label>
<input type="password" id="api_key" name="api_key" autocomplete="off" required${keyInvalid}>
<button type="submit" id="allow">Sign in and allow</button></form></fieldset>
<fieldset><legend>Or sign in with your wallet</legend>
<p class="muted">Sign-In with Ethereum; then choose one of the wallet's keys (a wallet without one gets its free key).</p>
<form method="post" action="${action('wallet')}" id="wallet-form">
<input type="hidden" name="message"><input type="hidden" name="signature">
<button type="button" id="wallet-button">Sign in with wallet</button></form>
<p class="muted" id="wallet-status" role="status" aria-live="polite"></p></fieldset>
<script>${walletScript(action('nonce'))}</script>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,"><title>${view.error ? 'Error: ' : ''}Sign in — allow an MCP host</title><style>${STYLE}</style></head>
<body><main><h1>Allow an MCP host</h1>${who}${error}${body}${deny}</main></body></html>`;
}

/** A page and the Content-Security-Policy it is sent with. */
export interface HtmlDocument {
  html: string;
  policy: string;
}

/**
 * The consent page with its policy: its inline script and style by hash, the wallet script's
 * nonce fetch to this origin, the favicon (a data: URL), forms posted here and redirected on to
 * the host, never framed.
 */
export function consentDocument(view: ConsentView): HtmlDocument {
  const html = consentPage(view);
  const formAction = ["'self'", ...(view.redirectSource ? [view.redirectSource] : [])];
  return { html, policy: pagePolicy(html, { connect: ["'self'"], img: ['data:'], formAction }) };
}

/** The error page with its policy: its style by hash, the favicon, no form, never framed. */
export function errorDocument(title: string, detail: string): HtmlDocument {
  const html = errorPage(title, detail);
  return { html, policy: pagePolicy(html, { img: ['data:'] }) };
}

/** A page that ends the flow with an error (an interaction that expired, a cookie that is missing). */
export function errorPage(title: string, detail: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><link rel="icon" href="data:,"><title>${escapeHtml(title)}</title>
<style>${STYLE}</style></head><body><main><h1>${escapeHtml(title)}</h1><p>${escapeHtml(detail)}</p></main></body></html>`;
}
