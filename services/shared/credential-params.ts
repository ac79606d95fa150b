/**
 * What a credential in a URL looks like, as one rule for every place that must not echo or keep it
 * (the access log, an x402 quote's resource) and for the answer that says it was ignored: keys
 * apply only in Authorization. Here, below keys/ and api/, so metering reads the same rule.
 */

/** Every live key starts with this, so leaked keys are easy to spot and scan for. */
export const LIVE_KEY_PREFIX = 'sk_live_';
/** Not a prefix this service issues; a test key's text is treated alike. */
const TEST_KEY_PREFIX = 'sk_test_';
/** Text of an API key (live or test), wherever it appears: in any parameter's value, or in the path. */
export const KEY_TEXT = new RegExp(`(?:${LIVE_KEY_PREFIX}|${TEST_KEY_PREFIX})[^/?&#]*`, 'g');

/**
 * Query parameters whose value is a secret, by name (decoded, any case): an API key, a token, an
 * OAuth code, a secret, a password or a signature, alone or as the last word of a longer name,
 * after `_ . -` (`api_key`, `access_token`, `client_secret`) or in camelCase (`accessToken`,
 * `clientSecret`, `privateKey`, `clientAPIToken`, `userAPIKey`). A camelCase `Code` is one too
 * (`authCode`, `otpCode`, `verificationCode`, `resetCode`, `inviteCode`), bar the plain names in
 * PLAIN_NAMES.
 */
const SECRET_WORDS =
  'key|apikey|token|code|secret|password|passwd|pwd|signature|sig|auth|authorization|session|credentials?|jwt';
const SECRET_NAME = new RegExp(`(?:^|[_.-])(?:${SECRET_WORDS})$`, 'i');
const CAMEL_SECRET_WORD = new RegExp(`^(?:${SECRET_WORDS})$`, 'i');
/** Names ending in a secret word whose values are plain (lower case; matched in any case). */
const PLAIN_NAMES = new Set(['errorcode', 'statuscode', 'zipcode']);
/**
 * A camelCase name's last word, when it has more than one: a capital and what follows in lower
 * case (`Token`), or a run of capitals (`TOKEN`); a run of capitals followed by a word ends
 * before that word's capital (`clientAPIToken`: `client`, `API`, `Token`).
 */
const CAMEL_LAST_WORD = /.([A-Z][a-z0-9]+|[A-Z][A-Z0-9]*)$/;
/** The longest parameter name an answer repeats; a longer one is cut. */
const NAMED_CHARS = 64;

function isSecretName(name: string): boolean {
  if (PLAIN_NAMES.has(name.toLowerCase())) return false;
  if (SECRET_NAME.test(name)) return true;
  const last = CAMEL_LAST_WORD.exec(name)?.[1];
  return last !== undefined && CAMEL_SECRET_WORD.test(last);
}

/** A query parameter (`name=value` as sent) named like a secret or holding key text; a bare value holding key text. */
export function isCredentialParam(param: string): boolean {
  const eq = param.indexOf('=');
  if (eq === -1) return hasKeyText(decoded(param));
  return isSecretName(decoded(param.slice(0, eq))) || hasKeyText(decoded(param.slice(eq + 1)));
}

/**
 * The name (decoded) of the URL's first credential parameter, to say it was ignored; a bare value
 * holding key text is named by its prefix, never repeated. Undefined when the query holds none.
 */
export function credentialParamName(url: string): string | undefined {
  const q = url.indexOf('?');
  if (q === -1) return undefined;
  const param = url
    .slice(q + 1)
    .split('&')
    .find(isCredentialParam);
  if (param === undefined) return undefined;
  const eq = param.indexOf('=');
  if (eq === -1) return `${decoded(param).includes(LIVE_KEY_PREFIX) ? LIVE_KEY_PREFIX : TEST_KEY_PREFIX}…`;
  const name = decoded(param.slice(0, eq));
  return name.length > NAMED_CHARS ? `${name.slice(0, NAMED_CHARS)}…` : name;
}

/**
 * The URL without its credential parameters (the ones the access log redacts): the resource an
 * x402 quote names. A quote is handed to wallets, facilitators and their logs, and is recorded
 * with the payment, so a key sent in the query (`?api_key=sk_live_…`, which the API ignores: keys
 * go in Authorization) is left out of it. The buyer pays for the URL without it, and a retry
 * sending the same query is quoted, and recorded, the same URL.
 */
export function withoutCredentialParams(url: string): string {
  const q = url.indexOf('?');
  if (q === -1) return url;
  const params = url.slice(q + 1).split('&');
  const kept = params.filter((param) => !isCredentialParam(param));
  if (kept.length === params.length) return url;
  return kept.length === 0 ? url.slice(0, q) : `${url.slice(0, q)}?${kept.join('&')}`;
}

export function hasKeyText(text: string): boolean {
  return text.includes(LIVE_KEY_PREFIX) || text.includes(TEST_KEY_PREFIX);
}

/** A query component decoded as a form value (`+` a space); as it is when it is not valid. */
function decoded(component: string): string {
  try {
    return decodeURIComponent(component.replace(/\+/g, ' '));
  } catch {
    return component;
  }
}
