// Reads {"card": <AgentCard>, "jwk": <private JWK with kid and alg>} on stdin
// and prints the card signed by the A2A JS SDK's generateAgentCardSignature.
import { generateAgentCardSignature } from "@a2a-js/sdk";
import { importJWK } from "jose";

const input = JSON.parse(await new Response(process.stdin).text());
const key = await importJWK(input.jwk, input.jwk.alg);
const sign = generateAgentCardSignature(key, { alg: input.jwk.alg, kid: input.jwk.kid, typ: "JOSE" });
process.stdout.write(JSON.stringify(await sign(input.card)));
