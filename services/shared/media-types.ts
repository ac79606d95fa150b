/**
 * The one spelling of JSON's media type on the service's answers: Fastify writes this for an
 * object it serialises, so an answer written by hand (a payment's, an MCP transport's, a refusal)
 * spelled otherwise would give one client two spellings on one route.
 */
export const JSON_UTF8 = 'application/json; charset=utf-8';
