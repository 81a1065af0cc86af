// discord.js, unmodified, on another gateway node of a cluster (cluster
// stage). Its REST base is a gateway+api node, whose GET /gateway/bot
// sends it to that node's gateway. Prints READY once connected; answers
// discord.py's "py says hi" with "js says hi"; prints what it saw as JSON.
const { Client, GatewayIntentBits } = require('discord.js');
const [rest, token, channelId] = process.argv.slice(2);
const client = new Client({
  intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.MessageContent],
  rest: { api: `http://${rest}/api` },
});
const seen = {};
const timer = setTimeout(() => { console.log(JSON.stringify(seen)); process.exit(1); }, 60000);
client.once('clientReady', () => {
  const guild = client.guilds.cache.first();
  Object.assign(seen, { user: client.user.tag, guild: guild && guild.name });
  console.log('READY');
});
client.on('messageCreate', async (message) => {
  if (message.channelId !== channelId) return;
  if (message.content === '!ping') seen.got_ping = true;
  else if (message.content === 'py says hi') {
    seen.got_py = message.author.tag;
    await message.channel.send('js says hi');
    console.log(JSON.stringify(seen));
    clearTimeout(timer);
    await client.destroy();
    process.exit(0);
  }
});
client.login(token);
