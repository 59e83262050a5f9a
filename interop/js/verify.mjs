// Reads {"card": <signed AgentCard>, "jwk": <public JWK with kid and alg>} on
// stdin and verifies the card with the A2A JS SDK's verifyAgentCardSignature.
// Exit status 0: verified; 1: not verified.
import { verifyAgentCardSignature } from "@a2a-js/sdk";
import { importJWK } from "jose";

const input = JSON.parse(await new Response(process.stdin).text());
console.debug = () => {}; // the SDK logs each failed entry
const verify = verifyAgentCardSignature(async (kid) => {
  if (kid !== input.jwk.kid) throw new Error(`unknown kid ${kid}`);
  return importJWK(input.jwk, input.jwk.alg);
});
try {
  await verify(input.card);
  process.stdout.write("verified\n");
} catch (e) {
  process.stdout.write(`not verified: ${e.message}\n`);
  process.exit(1);
}
