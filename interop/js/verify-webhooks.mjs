// Verifies switchboard's webhook deliveries with the Standard Webhooks
// reference library for TypeScript (npm standardwebhooks), the way a
// receiver in JavaScript would. Reads {secret, deliveries: [{name, headers,
// body}]} as JSON on stdin and prints {name: "ok" | "refused: …"} as JSON;
// webhook_test.go decides which must pass.
import { Webhook } from "standardwebhooks";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secret, deliveries } = JSON.parse(input);
const out = {};
for (const d of deliveries) {
  try {
    new Webhook(d.secret ?? secret).verify(d.body, d.headers);
    out[d.name] = "ok";
  } catch (e) {
    out[d.name] = "refused: " + e.message;
  }
}
process.stdout.write(JSON.stringify(out));
