// discord.js, unmodified, with only its REST base changed (the gateway URL
// comes from GET /gateway/bot).
const {
  AttachmentBuilder, ChannelType, Client, GatewayIntentBits, REST, Routes, SlashCommandBuilder,
} = require('discord.js');
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
  // Registration as bots do it: a bulk overwrite of the global commands,
  // then read back.
  const rest = new REST({ api: `http://${base}/api` }).setToken(token);
  const commands = [
    new SlashCommandBuilder().setName('echo').setDescription('Replies with pong')
      .addStringOption((o) => o.setName('text').setDescription('What to echo').setRequired(true))
      .addIntegerOption((o) => o.setName('times').setDescription('How often').setMinValue(1).setMaxValue(5)),
    { type: 2, name: 'Profile' },
  ].map((c) => (c.toJSON ? c.toJSON() : c));
  const put = await rest.put(Routes.applicationCommands(client.user.id), { body: commands });
  const fetched = await client.application.commands.fetch();
  seen.synced = put.map((c) => c.name).sort();
  seen.fetched = [...fetched.values()].map((c) => c.name).sort();
  const channel = await client.channels.fetch(channelId);
  const sent = await channel.send('hello from discord.js');
  seen.sent = sent.id;
  // Threads as bots use them: started from a message, talked in,
  // archived; a forum with a tag and a post in it carrying the tag.
  const thread = await sent.startThread({ name: 'js thread' });
  await thread.send('in the js thread');
  const archived = await thread.setArchived(true);
  const forum = await guild.channels.create({
    name: 'js-forum', type: ChannelType.GuildForum, availableTags: [{ name: 'question' }],
  });
  const post = await forum.threads.create({
    name: 'js post', message: { content: 'first js post' }, appliedTags: [forum.availableTags[0].id],
  });
  const starter = await post.fetchStarterMessage();
  Object.assign(seen, {
    thread_id: thread.id, thread_archived: archived.archived, forum_type: forum.type,
    forum_tags: forum.availableTags.map((t) => t.name), post_tags: post.appliedTags,
    post_tag_expected: forum.availableTags[0].id, post_starter: starter && starter.content,
  });
  // A file, as bots send them (AttachmentBuilder: multipart with
  // payload_json and files[0]), read back from the URL the message names.
  const withFile = await channel.send({
    content: 'a file',
    files: [new AttachmentBuilder(Buffer.from('hello from js'), { name: 'hello.txt', description: 'js greeting' })],
  });
  const attachment = withFile.attachments.first();
  Object.assign(seen, {
    file_name: attachment.name, file_size: attachment.size, file_description: attachment.description,
    file_bytes: await (await fetch(attachment.url)).text(),
  });
  await fetch(`http://${base}/api/v10/channels/${channelId}/messages`, {
    method: 'POST', headers: { authorization: ownerToken, 'content-type': 'application/json' },
    body: JSON.stringify({ content: '!ping' }),
  });
});
client.on('messageCreate', async (message) => {
  if (message.content === '!ping') {
    seen.got_ping = true;
    seen.ping_id = message.id;
    seen.ping_author = message.author.id;
    await message.reply('pong');
  } else if (message.content === 'pong') {
    seen.got_pong = true;
    // message.reply() sends message_reference; the server answers a
    // type-19 reply with referenced_message and the author mentioned.
    seen.reply_type = message.type;
    seen.reply_to = message.reference ? message.reference.messageId : null;
    seen.replied_user = message.mentions.repliedUser ? message.mentions.repliedUser.id : null;
    console.log(JSON.stringify(seen));
    clearTimeout(timer);
    await client.destroy();
    process.exit(0);
  }
});
client.login(token);
