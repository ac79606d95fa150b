import pkg from '../package.json' with { type: 'json' };

/**
 * The service's version, read from package.json: the one place it is set. MCP's serverInfo, the
 * OpenAPI document, the discovery cards and server.json all report this.
 */
export const SERVICE_VERSION: string = pkg.version;
