// A freqguard decision service client in JavaScript (Node 18+, no dependencies).
//   FREQGUARD_SERVICE=http://127.0.0.1:8080 FREQGUARD_TOKEN=... node client.mjs sms +4917612345678 hello
// Sends a message only if the policy allows it; a denial says which rule and when to retry.
// Exits 0 if the message may go, 1 if a rule said no, 2 on error (as hit.sh does).

const service = process.env.FREQGUARD_SERVICE ?? "http://127.0.0.1:8080";
const token = process.env.FREQGUARD_TOKEN;

export async function hit(policy, context, cost = 1) {
  const response = await fetch(`${service}/v1/policies/${encodeURIComponent(policy)}/hit`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify({ context, cost }),
  });
  const body = await response.json();
  if (!response.ok) {
    // 401 no token, 404 no such policy, 413 too large, 422 a bad field, 503 the store failed
    throw new Error(`${response.status} ${body.title}: ${body.detail ?? ""}`);
  }
  return body; // {allowed, retry_after, remaining, limit, reset_after, denied_by, rules, source}
}

const [policy, recipient, content] = process.argv.slice(2);
let decision;
try {
  decision = await hit(policy, { recipient, content });
} catch (error) {
  console.error(error.message); // the problem's status, title and detail, or the fetch's
  process.exit(2);
}
if (decision.allowed) {
  console.log(`send: ${decision.remaining} left`);
} else {
  console.log(`blocked by ${decision.denied_by.join(", ")}; retry in ${decision.retry_after} s`);
  process.exitCode = 1;
}
