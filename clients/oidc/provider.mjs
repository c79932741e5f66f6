// A real OpenID Connect provider for chatgate's single sign-on tests:
// node-oidc-provider (OpenID certified), with one confidential client
// (`chatgate`, client_secret_basic, PKCE required), its development login
// form (any password; the login is the user's e-mail address) and consent
// granted at once. Listens on 127.0.0.1 (PORT, 0 for a free port) and
// prints its issuer URL on the first line of stdout.
//
//   REDIRECT_URIS=http://127.0.0.1:9090/sso/callback node provider.mjs
import http from "node:http";
import { generateKeyPairSync } from "node:crypto";
import Provider from "oidc-provider";

const port = Number(process.env.PORT || 0);
const redirects = (process.env.REDIRECT_URIS || "").split(",").filter((u) => u);
const secret = process.env.CLIENT_SECRET || "chatgate-test-secret";

const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ format: "jwk" });
const ec = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ format: "jwk" });

const server = http.createServer();
// A request the HTTP parser refuses is said on stderr, with its bytes.
server.on("clientError", (err, socket) => {
  console.error(`clientError ${err.code}: ${err.rawPacket ? err.rawPacket.toString() : ""}`);
  socket.destroy();
});
server.listen(port, "127.0.0.1", () => {
  const issuer = `http://localhost:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: "chatgate",
      client_secret: secret,
      redirect_uris: redirects,
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
      id_token_signed_response_alg: process.env.ID_TOKEN_ALG || "RS256",
    }],
    jwks: { keys: [{ ...rsa, use: "sig", alg: "RS256", kid: "rsa-1" }, { ...ec, use: "sig", alg: "ES256", kid: "ec-1" }] },
    pkce: { required: () => true },
    cookies: { keys: ["chatgate-test-cookie-key"] },
    claims: { openid: ["sub"], email: ["email", "email_verified"] },
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true } },
    findAccount: (ctx, id) => ({
      accountId: id,
      claims: () => ({ sub: id, email: id, email_verified: true }),
    }),
    async loadExistingGrant(ctx) {
      const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
      grant.addOIDCScope("openid email");
      await grant.save();
      return grant;
    },
  });
  server.on("request", provider.callback());
  process.stdout.write(`${issuer}\n`);
  // The provider's own notices go to stderr: whoever reads the first line
  // may close stdout after it.
  console.log = console.info = console.warn = (...args) => console.error(...args);
});
