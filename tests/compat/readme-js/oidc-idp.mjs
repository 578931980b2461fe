// A small OpenID Provider for weft's compat suite (tests/compat/test_oidc.py),
// built on the `oidc-provider` package. It issues RFC 9068 JWT access tokens
// through the client_credentials grant and can rotate its signing key on demand.
//
//   node oidc-idp.mjs --port P [--host 127.0.0.1] [--alg ES256|RS256]
//
// Issuer: http://127.0.0.1:P (the --host only changes the listening address).
// Clients (oidc-provider takes client_secret_post and client_secret_basic alike
// for a client registered with either):
//   svc   / svc-secret    access tokens live 600 s
//   short / short-secret  access tokens live 5 s
// A token request with `resource=urn:weft:...` gets a JWT whose `aud` is that
// resource, `sub` and `client_id` are the client id, and `scope` is the subset of
// "llm:call runs:create runs:read memory:read" the request asked for (other
// requested scopes are dropped silently). Any other resource is refused with
// invalid_target; a request without a resource gets an opaque (non-JWT) token.
//
// Test-only routes, outside the OIDC ones:
//   POST /__rotate  new signing key (new kid); the JWKS then lists only it.
//                   Answers {"kid": "<new kid>"}.
//   GET  /__kid     {"kid": "<current kid>"}
//
// stdout carries exactly one line, `READY {json}`, once listening; every other
// message goes to stderr. SIGTERM / SIGINT close the server and exit 0.

import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { parseArgs } from 'node:util';

// oidc-provider prints its notices with console.info, which is stdout; keep
// stdout for the READY line alone.
for (const name of ['log', 'info', 'debug']) {
  console[name] = (...args) => console.error(...args);
}

const { Provider, errors } = await import('oidc-provider');

const { values: args } = parseArgs({
  options: {
    port: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    alg: { type: 'string', default: 'ES256' },
  },
  strict: true,
});

const port = Number(args.port);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error('usage: node oidc-idp.mjs --port P [--host 127.0.0.1] [--alg ES256|RS256]');
  process.exit(2);
}
const alg = args.alg;
if (alg !== 'ES256' && alg !== 'RS256') {
  console.error(`unsupported --alg ${alg}: use ES256 or RS256`);
  process.exit(2);
}

const ISSUER = `http://127.0.0.1:${port}`;
const RESOURCE_PREFIX = 'urn:weft:';
const RESOURCE_SCOPE = 'llm:call runs:create runs:read memory:read';
const TTL_SECONDS = { svc: 600, short: 5 };

function newSigningJwk() {
  const { privateKey } = alg === 'ES256'
    ? crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    ...privateKey.export({ format: 'jwk' }),
    kid: crypto.randomBytes(12).toString('base64url'),
    use: 'sig',
    alg,
  };
}

// A plain in-process store; it only ever holds the client_credentials grant's
// records (no sessions, no interactions), and replaces the package's
// development adapter so it does not warn.
const store = new Map();
class MapAdapter {
  constructor(model) {
    this.model = model;
  }

  key(id) {
    return `${this.model}:${id}`;
  }

  async upsert(id, payload, expiresIn) {
    const expiresAt = typeof expiresIn === 'number' ? Date.now() + expiresIn * 1000 : Infinity;
    store.set(this.key(id), { payload, expiresAt });
  }

  async find(id) {
    const entry = store.get(this.key(id));
    if (!entry) return undefined;
    if (entry.expiresAt <= Date.now()) {
      store.delete(this.key(id));
      return undefined;
    }
    return entry.payload;
  }

  async findByUid() {
    return undefined;
  }

  async findByUserCode() {
    return undefined;
  }

  async consume(id) {
    const entry = store.get(this.key(id));
    if (entry) entry.payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    store.delete(this.key(id));
  }

  async revokeByGrantId() {}
}

function makeClient(clientId, secret) {
  return {
    client_id: clientId,
    client_secret: secret,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_post',
  };
}

function buildProvider(jwk) {
  const provider = new Provider(ISSUER, {
    adapter: MapAdapter,
    jwks: { keys: [jwk] },
    clients: [makeClient('svc', 'svc-secret'), makeClient('short', 'short-secret')],
    // Listed in discovery's scopes_supported; what a token gets is the
    // requested subset of the resource server's scope.
    scopes: ['openid', 'offline_access', ...RESOURCE_SCOPE.split(' ')],
    clientDefaults: {
      grant_types: ['client_credentials'],
      response_types: [],
      id_token_signed_response_alg: alg,
    },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: false },
      revocation: { enabled: false },
      resourceIndicators: {
        enabled: true,
        getResourceServerInfo: async (_ctx, resource) => {
          if (typeof resource !== 'string' || !resource.startsWith(RESOURCE_PREFIX)
            || resource.length === RESOURCE_PREFIX.length) {
            throw new errors.InvalidTarget(`resource must start with ${RESOURCE_PREFIX}`);
          }
          return {
            audience: resource,
            scope: RESOURCE_SCOPE,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg } },
          };
        },
      },
    },
    ttl: {
      ClientCredentials: (_ctx, _token, client) => TTL_SECONDS[client.clientId] ?? 600,
      AccessToken: 600,
    },
  });
  provider.on('server_error', (_ctx, err) => console.error('oidc-provider server_error:', err));
  return provider;
}

let currentJwk = newSigningJwk();
let handler = buildProvider(currentJwk).callback();

function sendJson(res, status, body) {
  const data = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(data),
    'cache-control': 'no-store',
  });
  res.end(data);
}

const server = http.createServer((req, res) => {
  const path = (req.url ?? '/').split('?')[0];
  if (path === '/__rotate') {
    if (req.method !== 'POST') return sendJson(res, 405, { error: 'use POST' });
    req.resume();
    currentJwk = newSigningJwk();
    handler = buildProvider(currentJwk).callback();
    console.error(`oidc-idp: rotated signing key, kid ${currentJwk.kid}`);
    return sendJson(res, 200, { kid: currentJwk.kid });
  }
  if (path === '/__kid') {
    if (req.method !== 'GET') return sendJson(res, 405, { error: 'use GET' });
    return sendJson(res, 200, { kid: currentJwk.kid });
  }
  return handler(req, res);
});

function shutdown(signal) {
  console.error(`oidc-idp: ${signal}, closing`);
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

server.on('error', (err) => {
  console.error(`oidc-idp: ${err.message}`);
  process.exit(1);
});

server.listen(port, args.host, () => {
  const ready = {
    issuer: ISSUER,
    token_endpoint: `${ISSUER}/token`,
    jwks_uri: `${ISSUER}/jwks`,
    kid: currentJwk.kid,
  };
  process.stdout.write(`READY ${JSON.stringify(ready)}\n`);
});
