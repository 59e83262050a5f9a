// First contact from JavaScript, as an agent written in another language
// does it against examples/host -dev:
//
//	node interop/js/first-contact.mjs http://127.0.0.1:8080
//
// (examples/host's TestFirstContactFromJavaScript passes {url, vectors} on
// stdin instead). It needs the packages `npm ci --prefix interop/js`
// installs, and bob-desk published on the host (the walkthrough does it):
//
//  1. compute the friend-request nonce from its specification (RequestNonce
//     in provenance.go) and check it against the repository's vectors and
//     the host's /friend-requests/nonce route;
//  2. resolve bob-desk's Agent Card with the official A2A SDK's resolver;
//  3. send a real friend request with an ID token for that nonce;
//  4. after bob approves (the script signs bob in and approves through the
//     host), collect the credential, use it with the official MCP
//     TypeScript client, and see a revocation come back as a tool error.
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { DefaultAgentCardResolver } from "@a2a-js/sdk/client";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

// The host's URL as the first argument (the README's way), or
// {url, vectors} on stdin (examples/host's test's way).
const input = process.argv[2]
  ? { url: process.argv[2], vectors: new URL("../../testdata/request-nonce.json", import.meta.url).pathname }
  : JSON.parse(readFileSync(0, "utf8"));
const url = input.url;
const fail = (msg) => { console.error(msg); process.exit(1); };
const b64url = (buf) => Buffer.from(buf).toString("base64url");

// The nonce, from the text of the specification: RFC 8785 (JCS) of
// {"v":3,"from","to","scope":[{"queue","verbs"}…],"why","pickup"}, plus
// "jkt" (the key's RFC 7638 thumbprint) for a request bound to a key. For
// an object of strings, arrays and one small integer, JSON.stringify of an
// object built with its members in sorted order is its JCS form.
const thumbprint = (k) =>
  b64url(createHash("sha256").update(JSON.stringify(
    k.kty === "EC" ? { crv: k.crv, kty: k.kty, x: k.x, y: k.y } : { crv: k.crv, kty: k.kty, x: k.x }), "utf8").digest());
function canonical(r) {
  return JSON.stringify({
    from: r.from,
    ...(r.key ? { jkt: thumbprint(r.key) } : {}),
    pickup: r.pickup ?? "",
    scope: (r.scope ?? []).map((e) => ({ queue: e.queue, verbs: e.verbs ?? [] })),
    to: r.to,
    v: 3,
    why: r.why ?? "",
  });
}
const nonceOf = (r) => b64url(createHash("sha256").update(canonical(r), "utf8").digest());

const vectors = JSON.parse(readFileSync(input.vectors, "utf8")).vectors;
for (const v of vectors) {
  if (canonical(v.request) !== v.canonical) fail(`vector ${v.name}: canonical ${canonical(v.request)} != ${v.canonical}`);
  if (nonceOf(v.request) !== v.nonce) fail(`vector ${v.name}: nonce differs`);
}

async function post(path, body, headers = {}) {
  const res = await fetch(url + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

// 2. The card, resolved as the A2A SDK resolves it: from the persona's URL
// with a trailing slash, and from the card's own URL.
const resolver = new DefaultAgentCardResolver();
const card = await resolver.resolve(`${url}/agents/bob-desk/`);
const same = await resolver.resolve(`${url}/agents/bob-desk`, "");
if (card.name !== same.name) fail("the two card URLs disagree");

// 3. The friend request.
const secret = "sbp_" + b64url(randomBytes(32));
const req = {
  from: "alice-bot",
  to: "bob-desk",
  scope: [{ queue: "inbox", verbs: ["create_for", "get"] }],
  why: "I am a JavaScript agent <script>&",
  pickup: b64url(createHash("sha256").update(secret).digest()),
};
const nonce = nonceOf(req);
const hostNonce = await post("/friend-requests/nonce", req);
if (hostNonce.body.nonce !== nonce) fail(`host nonce ${hostNonce.body.nonce} != ${nonce}`);
const tok = await post("/dev/id-token", { subject: "alice", nonce });
const sent = await post("/agents/bob-desk/friend-requests", { ...req, id_token: tok.body.id_token });
if (sent.status !== 201) fail(`friend request: ${sent.status} ${JSON.stringify(sent.body)}`);
const edge = sent.body.edge.id;

// Bob signs in and approves, narrowing to create_for.
const login = await post("/dev/login", { subject: "bob" });
const cookie = login.headers.getSetCookie().map((c) => c.split(";")[0]).find((c) => c.startsWith("sb_session="));
const ap = await post(`/me/edges/${edge}/approve`, { scope: [{ queue: "inbox", verbs: ["create_for"] }] }, { Cookie: cookie });
if (ap.status !== 200) fail(`approve: ${ap.status} ${JSON.stringify(ap.body)}`);

// 4. The credential, over MCP with the official TypeScript client.
const col = await post(`/edges/${edge}/collect`, { secret });
if (col.status !== 200) fail(`collect: ${col.status} ${JSON.stringify(col.body)}`);
const credential = col.body.credential;
const client = new Client({ name: "js-agent", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(url + "/mcp"), {
  requestInit: { headers: { Authorization: `Bearer ${credential}` } },
}));
const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const made = await client.callTool({ name: "create_for", arguments: { queue: "inbox", kind: "js.hello", payload: { from: "js" } } });
if (made.isError) fail(`create_for: ${JSON.stringify(made.content)}`);

// Bob revokes; the open session's next call is a tool error, not a throw.
const rv = await post(`/me/grants/${ap.body.grant.id}/revoke`, {}, { Cookie: cookie });
if (rv.status !== 204) fail(`revoke: ${rv.status} ${JSON.stringify(rv.body)}`);
const after = await client.callTool({ name: "create_for", arguments: { queue: "inbox", kind: "js.hello" } });
await client.close();

// A request without a credential: the documented JSON error and challenge.
const bare = await fetch(url + "/mcp", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
console.log(JSON.stringify({
  vectors: vectors.length,
  card: card.name,
  edge,
  tools,
  created: made.structuredContent.created,
  revokedIsError: after.isError === true,
  revokedText: after.content[0].text,
  unauthorized: { status: bare.status, challenge: bare.headers.get("www-authenticate"), body: await bare.json() },
}));
