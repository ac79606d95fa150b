/**
 * A server the process depends on (PostgreSQL, NATS, Redis) could not be used when it was first
 * reached: out of reach, a login it refused, a host name that does not resolve, a server that did
 * not answer within the start's wait (NATS_STARTUP_TIMEOUT_MS), an SSL mode the server does not
 * serve; or the system refused the address the service listens on (PORT in use, HOST not of this
 * machine). The message names the server or address (credentials masked) and the setting to
 * correct; a service's start and an operator command line print it as it is, with no stack, since
 * nothing in the code is at fault.
 */
export class DependencyRefusedError extends Error {
  override readonly name = 'DependencyRefusedError';
}
