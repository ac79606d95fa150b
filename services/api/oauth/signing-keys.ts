import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { OAuthSecrets } from '../../../contracts/oauth.ts';
import { splitList } from '../../../contracts/setting-lists.ts';
import type { OAuthStore } from './store.ts';

const SECRETS_KEY = 'secrets';

/** A new private JWKS (RS256, which clients default to, and ES256) and one cookie secret. */
function generateSecrets(): OAuthSecrets {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
  return {
    jwks: {
      keys: [
        { ...rsa, kty: 'RSA', kid: randomUUID(), alg: 'RS256', use: 'sig' },
        { ...ec, kty: 'EC', kid: randomUUID(), alg: 'ES256', use: 'sig' },
      ],
    },
    cookieKeys: [randomBytes(32).toString('base64url')],
  };
}

/**
 * The signing keys and cookie secrets: from configuration when given, otherwise generated once and
 * kept in the OAuth store. The first host to start writes them; every other host (and every
 * restart) reads the same ones, so a cookie or token made by one host checks on all.
 */
export async function loadSecrets(
  store: OAuthStore,
  config: { OAUTH_JWKS?: string | undefined; OAUTH_COOKIE_KEYS?: string | undefined },
): Promise<OAuthSecrets> {
  const stored = async () =>
    OAuthSecrets.parse(JSON.parse(await store.putIfAbsent(SECRETS_KEY, JSON.stringify(generateSecrets()))));
  const fromStore =
    config.OAUTH_JWKS === undefined || config.OAUTH_COOKIE_KEYS === undefined ? await stored() : null;
  return {
    jwks:
      config.OAUTH_JWKS === undefined
        ? fromStore!.jwks
        : OAuthSecrets.shape.jwks.parse(JSON.parse(config.OAUTH_JWKS)),
    cookieKeys:
      config.OAUTH_COOKIE_KEYS === undefined ? fromStore!.cookieKeys : splitList(config.OAUTH_COOKIE_KEYS),
  };
}
