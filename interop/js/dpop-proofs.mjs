// Makes DPoP proofs (RFC 9449) with the npm dpop package, as a JavaScript
// agent would, for dpop_test.go to verify. Reads {jwk, requests: [{htm, htu,
// token, nonce}]} as JSON on stdin — jwk the agent's key pair, with its
// private part, made by the Go test — and prints {proofs: [...]}: one
// proof per request, over token (the credential, or the pickup secret).
import * as DPoP from "dpop";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { jwk, requests } = JSON.parse(input);
const algorithm = jwk.kty === "OKP" ? { name: "Ed25519" } : { name: "ECDSA", namedCurve: "P-256" };
const { d, ...pub } = jwk;
const keypair = {
  privateKey: await crypto.subtle.importKey("jwk", jwk, algorithm, false, ["sign"]),
  publicKey: await crypto.subtle.importKey("jwk", pub, algorithm, true, ["verify"]),
};
const proofs = [];
for (const r of requests) {
  proofs.push(await DPoP.generateProof(keypair, r.htu, r.htm, r.nonce || undefined, r.token || undefined));
}
process.stdout.write(JSON.stringify({ proofs }));
