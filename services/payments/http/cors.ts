/**
 * Browsers hide response headers from scripts unless they are exposed, and the payment headers
 * are the whole protocol: a browser client must read PAYMENT-REQUIRED and PAYMENT-RESPONSE and
 * send PAYMENT-SIGNATURE / X-PAYMENT. It also reads what tells it how to go on: X-Payment-Replayed
 * (the kept answer of a payment sent again, not a second charge), the request-rate budget and
 * when to retry.
 */
export const CORS_RESPONSE_HEADERS: Record<string, string> = {
  'access-control-allow-origin': '*',
  'access-control-expose-headers':
    'PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, X-Payment-Replayed, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After',
};

export const CORS_PREFLIGHT_HEADERS: Record<string, string> = {
  ...CORS_RESPONSE_HEADERS,
  'access-control-allow-methods': 'POST, OPTIONS',
  'access-control-allow-headers': 'Content-Type, PAYMENT-SIGNATURE, X-PAYMENT, Authorization',
  'access-control-max-age': '600',
};
