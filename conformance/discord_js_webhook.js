// discord.js's WebhookClient, unmodified, with only its REST base changed.
// Usage: discord_js_webhook.js HOST:PORT OWNER_TOKEN CHANNEL_ID
// The owner creates a webhook over REST; discord.js then drives it by id
// and token (send with wait, fetch, edit and delete its message) and
// parses every answer. Prints one JSON line of what it saw.
const { WebhookClient } = require('discord.js');
const [base, ownerToken, channelId] = process.argv.slice(2);

(async () => {
  const response = await fetch(`http://${base}/api/v10/channels/${channelId}/webhooks`, {
    method: 'POST', headers: { authorization: ownerToken, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'js hook' }),
  });
  const created = await response.json();
  const webhook = new WebhookClient({ id: created.id, token: created.token }, { rest: { api: `http://${base}/api` } });
  const seen = {};
  const message = await webhook.send({ content: 'from discord.js', username: 'JsHook' });
  Object.assign(seen, { webhook_id: message.webhook_id, author: message.author.username, content: message.content });
  const fetched = await webhook.fetchMessage(message.id);
  const edited = await webhook.editMessage(message.id, { content: 'edited by discord.js' });
  Object.assign(seen, { fetched: fetched.content, edited: edited.content });
  await webhook.deleteMessage(message.id);
  const renamed = await webhook.edit({ name: 'js renamed' });
  seen.renamed = renamed.name;
  await webhook.delete();
  seen.created_id = created.id;
  console.log(JSON.stringify(seen));
  webhook.destroy();
})().catch((error) => { console.error(error); process.exit(1); });
