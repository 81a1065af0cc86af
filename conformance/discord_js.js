// discord.js, unmodified, with only its REST base changed (the gateway URL
// comes from GET /gateway/bot).
const { Client, GatewayIntentBits } = require('discord.js');
const [base, token, channelId, ownerToken] = process.argv.slice(2);
const client = new Client({
  intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.MessageContent],
  rest: { api: `http://${base}/api` },
});
const seen = {};
const timer = setTimeout(() => { console.log(JSON.stringify(seen)); process.exit(1); }, 60000);
client.once('clientReady', async () => {
  const guild = client.guilds.cache.first();
  Object.assign(seen, { user: client.user.tag, guild: guild && guild.name, channels: guild && guild.channels.cache.map((c) => c.name) });
  const channel = await client.channels.fetch(channelId);
  seen.sent = (await channel.send('hello from discord.js')).id;
  await fetch(`http://${base}/api/v10/channels/${channelId}/messages`, {
    method: 'POST', headers: { authorization: ownerToken, 'content-type': 'application/json' },
    body: JSON.stringify({ content: '!ping' }),
  });
});
client.on('messageCreate', async (message) => {
  if (message.content === '!ping') { seen.got_ping = true; await message.reply('pong'); }
  else if (message.content === 'pong') {
    seen.got_pong = true;
    console.log(JSON.stringify(seen));
    clearTimeout(timer);
    await client.destroy();
    process.exit(0);
  }
});
client.login(token);
