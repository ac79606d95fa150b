import { anyOriginHeaders, anyOriginPreflight } from '../../api/cors.ts';
import { RATE_LIMIT_EXPOSED_HEADERS } from '../../metering/rate-limit.ts';

/**
 * Any origin, as every open route (api/cors.ts). Browsers hide response headers from scripts
 * unless they are exposed, and the payment headers are the whole protocol: a browser client must
 * read PAYMENT-REQUIRED and PAYMENT-RESPONSE and send PAYMENT-SIGNATURE / X-PAYMENT. It also reads
 * what tells it how to go on: X-Payment-Replayed (the kept answer of a payment sent again, not a
 * second charge), the request-rate budget and when to retry.
 */
const EXPOSED = `PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, X-Payment-Replayed, ${RATE_LIMIT_EXPOSED_HEADERS}`;

export const CORS_RESPONSE_HEADERS: Record<string, string> = anyOriginHeaders(EXPOSED);

export const CORS_PREFLIGHT_HEADERS: Record<string, string> = anyOriginPreflight(
  'POST, OPTIONS',
  'Content-Type, PAYMENT-SIGNATURE, X-PAYMENT, Authorization',
  EXPOSED,
);
