// discord.js, unmodified, answering interactions a user creates.
//
// Usage: discord_js_interactions.js HOST:PORT BOT_TOKEN CHANNEL_ID OWNER_TOKEN
// The bot registers its commands with `rest.put(Routes.applicationCommands)`
// and `Routes.applicationGuildCommands`. The owner then acts as Discord's own
// client does: a gateway session of its own (its `session_id` goes into every
// `POST /interactions`; INTERACTION_CREATE / INTERACTION_SUCCESS by nonce,
// INTERACTION_MODAL_CREATE and MESSAGE_CREATE arrive on it) and plain HTTP
// with its user token. It invokes slash commands (type 2), clicks buttons and
// picks from a string select of the bot's ActionRowBuilder rows (type 3), and
// submits the modals a button and a command showed (type 5). discord.js
// answers with `reply`, `deferReply` + `editReply` + `followUp`, `update`,
// `showModal` and `fields.getTextInputValue`. What the owner then reads back
// over REST (and what a second member may not read: the ephemeral reply) is
// printed as one JSON line.
const crypto = require('node:crypto');
const WebSocket = require('ws');
const {
  ActionRowBuilder, AttachmentBuilder, ButtonBuilder, ButtonStyle, Client, GatewayIntentBits, LabelBuilder, MessageFlags,
  ModalBuilder, REST, Routes, SlashCommandBuilder, StringSelectMenuBuilder, TextInputBuilder, TextInputStyle,
} = require('discord.js');

const [base, token, channelId, ownerToken] = process.argv.slice(2);
const rest = `http://${base}/api/v10`;
const client = new Client({ intents: [GatewayIntentBits.Guilds], rest: { api: `http://${base}/api` } });
const seen = {};
const LOADING = 128;
const done = (code) => { console.log(JSON.stringify(seen)); process.exit(code); };
const timer = setTimeout(() => done(1), 80000);

// A modal of a text input in a label (the current form) and one in an
// action row (the legacy form discord.js still builds).
function feedbackModal(customId, title) {
  return new ModalBuilder().setCustomId(customId).setTitle(title)
    .addLabelComponents(new LabelBuilder().setLabel('Subject').setTextInputComponent(
      new TextInputBuilder().setCustomId('feedback:subject').setStyle(TextInputStyle.Short).setMaxLength(40)))
    .addComponents(new ActionRowBuilder().addComponents(
      new TextInputBuilder().setCustomId('feedback:body').setLabel('Body').setStyle(TextInputStyle.Paragraph)
        .setRequired(false)));
}

async function answer(interaction) {
  if (interaction.isChatInputCommand()) {
    const name = interaction.commandName;
    if (name === 'hello') {
      // A guild command names its guild; a global one does not.
      seen.hello_option = interaction.options.getString('text');
      seen.hello_scope = interaction.commandGuildId === interaction.guildId ? 'guild' : 'global';
      // With a file, as bots answer with one (multipart, payload_json).
      const response = await interaction.reply({
        content: `hello ${seen.hello_option}`, withResponse: true,
        files: [new AttachmentBuilder(Buffer.from('greeting'), { name: 'greeting.txt' })],
      });
      seen.hello_response_id = response.resource?.message?.id ?? null;
    } else if (name === 'later') {
      seen.later_scope = interaction.commandGuildId ? 'guild' : 'global';
      await interaction.deferReply();
      seen.later_deferred = interaction.deferred;
      const original = await interaction.editReply('edited original');
      const followup = await interaction.followUp('followup');
      Object.assign(seen, { original_id: original.id, followup_id: followup.id });
    } else if (name === 'panel') {
      const buttons = new ActionRowBuilder().addComponents(
        new ButtonBuilder().setCustomId('panel:press').setLabel('Press').setStyle(ButtonStyle.Primary),
        new ButtonBuilder().setCustomId('panel:form').setLabel('Feedback').setStyle(ButtonStyle.Secondary));
      const select = new ActionRowBuilder().addComponents(
        new StringSelectMenuBuilder().setCustomId('panel:pick').setMinValues(1).setMaxValues(2).addOptions(
          { label: 'Alpha', value: 'a' }, { label: 'Beta', value: 'b' }, { label: 'Gamma', value: 'c' }));
      await interaction.reply({ content: 'panel', components: [buttons, select] });
      seen.panel_sent = true;
    } else if (name === 'secret') {
      await interaction.reply({ content: 'for your eyes only', flags: MessageFlags.Ephemeral });
      const own = await interaction.fetchReply();
      Object.assign(seen, { secret_fetched_flags: own.flags.bitfield, secret_reply_id: own.id });
    } else if (name === 'survey') {
      await interaction.showModal(feedbackModal('survey', 'Survey'));
      seen.survey_shown = true;
    }
  } else if (interaction.isButton()) {
    if (interaction.customId === 'panel:press') {
      seen.button_user = interaction.user.id;
      await interaction.update({ content: `pressed by ${interaction.user.username}` });
      seen.button_updated = true;
    } else if (interaction.customId === 'panel:form') {
      await interaction.showModal(feedbackModal('feedback', 'Feedback'));
      seen.modal_sent = true;
    }
  } else if (interaction.isStringSelectMenu()) {
    seen.select_values = interaction.values;
    await interaction.reply(`picked ${interaction.values.join(',')}`);
  } else if (interaction.isModalSubmit()) {
    const subject = interaction.fields.getTextInputValue('feedback:subject');
    const body = interaction.fields.getTextInputValue('feedback:body');
    seen[`${interaction.customId}_values`] = [subject, body];
    seen[`${interaction.customId}_from_message`] = interaction.isFromMessage();
    await interaction.reply(`${interaction.customId} thanks for ${subject}`);
  }
}
// A failed answer is reported (the JSON line still prints), not thrown.
client.on('interactionCreate', (interaction) => answer(interaction).catch((error) => {
  seen.answer_error = `${interaction.customId ?? interaction.commandName}: ${error && error.stack || error}`;
}));

// The owner as Discord's client: a gateway session and plain HTTP.
class User {
  constructor(userToken) { this.token = userToken; this.events = []; this.waiters = []; this.seq = null; }

  async call(method, path, body, as) {
    const response = await fetch(`${rest}${path}`, {
      method, headers: { authorization: as || this.token, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return [response.status, text ? JSON.parse(text) : null];
  }

  connect() {
    return new Promise((resolve, reject) => {
      this.ws = new WebSocket(`ws://${base}/?v=10&encoding=json`);
      this.ws.on('error', reject);
      this.ws.on('message', (raw) => {
        const msg = JSON.parse(raw.toString());
        if (msg.s) this.seq = msg.s;
        if (msg.op === 10) {
          this.ws.send(JSON.stringify({ op: 2, d: {
            token: this.token, intents: 1 | (1 << 9) | (1 << 15),
            properties: { os: 'linux', browser: 'conformance', device: 'conformance' },
          } }));
          this.beat = setInterval(() => this.ws.send(JSON.stringify({ op: 1, d: this.seq })), msg.d.heartbeat_interval);
        } else if (msg.op === 0) {
          if (msg.t === 'READY') {
            Object.assign(this, { sessionId: msg.d.session_id, id: msg.d.user.id });
            resolve();
          }
          this.events.push([msg.t, msg.d]);
          this.waiters = this.waiters.filter((w) => !(w.match(msg.t, msg.d) && (w.resolve([msg.t, msg.d]), true)));
        }
      });
    });
  }

  close() { clearInterval(this.beat); this.ws.close(); }

  // The first event `match(name, data)` accepts, seen or to come.
  waitFor(match, what, timeoutMs = 15000) {
    const found = this.events.find(([t, d]) => match(t, d));
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
      this.waiters.push({ match, resolve: (event) => { clearTimeout(timeout); resolve(event); } });
    });
  }

  // POST /interactions: the outcome the session hears of, and the interaction's id.
  async interact(type, data, applicationId, guildId, messageId) {
    const nonce = String(BigInt(`0x${crypto.randomBytes(7).toString('hex')}`));
    const body = { type, application_id: applicationId, guild_id: guildId, channel_id: channelId,
      session_id: this.sessionId, nonce, data };
    if (messageId) body.message_id = messageId;
    const [status, answer] = await this.call('POST', '/interactions', body);
    if (status !== 204) return [`HTTP ${status} ${JSON.stringify(answer)}`, null];
    const [, created] = await this.waitFor((t, d) => t === 'INTERACTION_CREATE' && d.nonce === nonce, 'INTERACTION_CREATE');
    const [outcome] = await this.waitFor((t, d) => (t === 'INTERACTION_SUCCESS' || t === 'INTERACTION_FAILURE')
      && d.nonce === nonce, 'INTERACTION_SUCCESS');
    return [outcome, created.id];
  }

  // The channel's message with this content, read as history (REST).
  async message(content) {
    const [, history] = await this.call('GET', `/channels/${channelId}/messages?limit=50`);
    return history.find((m) => m.content === content) || null;
  }
}

// The bot's side is done with a step (its HTTP answers come back after the
// user heard of the outcome).
async function until(key, timeoutMs = 10000) {
  for (let waited = 0; !(key in seen) && !(`${key}_error` in seen) && waited < timeoutMs; waited += 50) {
    await new Promise((r) => setTimeout(r, 50));
  }
}

function metadataOk(message, type, userId, interactionId, extra = {}) {
  const meta = (message && message.interaction_metadata) || {};
  return meta.type === type && meta.user?.id === userId && meta.id === interactionId
    && Object.entries(extra).every(([k, v]) => meta[k] === v);
}

// What the client submits for a modal it was shown: each label's component,
// each action row's components, with the typed values.
function submission(shown, values) {
  return shown.components.map((item) => (item.type === 18
    ? { type: 18, component: { type: item.component.type, custom_id: item.component.custom_id,
      value: values[item.component.custom_id] } }
    : { type: 1, components: item.components.map((c) => ({ type: c.type, custom_id: c.custom_id,
      value: values[c.custom_id] })) }));
}

async function asUser(appId, guildId) {
  const user = new User(ownerToken);
  await user.connect();
  // What the client knows of the commands, with id and version.
  const [, guildCommands] = await user.call('GET', `/applications/${appId}/guilds/${guildId}/commands`);
  const [, globalCommands] = await user.call('GET', `/applications/${appId}/commands`);
  const byName = Object.fromEntries([...globalCommands, ...guildCommands].map((c) => [c.name, c]));
  const command = (name, options = []) => {
    const c = byName[name];
    return { id: c.id, name: c.name, type: 1, version: c.version, options };
  };

  // A guild command with an option: reply.
  let [outcome, helloId] = await user.interact(2, command('hello', [{ type: 3, name: 'text', value: 'world' }]),
    appId, guildId);
  await until('hello_response_id');
  const hello = await user.message('hello world');
  Object.assign(seen, { hello_outcome: outcome, hello_seen: !!hello,
    hello_metadata: metadataOk(hello, 2, user.id, helloId, { name: 'hello', command_type: 1 }),
    hello_author_is_bot: hello?.author?.id === client.user.id,
    hello_same_message: !!hello && hello.id === seen.hello_response_id });
  const file = hello?.attachments?.[0];
  if (file) seen.hello_file = [file.filename, await (await fetch(file.url)).text()];

  // A global command: deferReply ("thinking…"), editReply, followUp.
  let laterId;
  [outcome, laterId] = await user.interact(2, command('later'), appId, guildId);
  await until('followup_id');
  const [, thinking] = await user.waitFor((t, d) => t === 'MESSAGE_CREATE' && d.interaction_metadata?.id === laterId,
    'the deferred message');
  const original = await user.message('edited original');
  const followup = await user.message('followup');
  Object.assign(seen, { later_outcome: outcome, deferred_edited: !!original,
    thinking_loading: !!(thinking.flags & LOADING) && thinking.content === '' && thinking.id === original?.id,
    deferred_loading: !!((original?.flags ?? 0) & LOADING),
    deferred_same_message: !!original && original.id === seen.original_id,
    followup_seen: !!followup && followup.id === seen.followup_id,
    followup_metadata: metadataOk(followup, 2, user.id, laterId, { original_response_message_id: original?.id }) });

  // A button row and a string select: update, a select's values, a
  // button's modal and its submit.
  [outcome] = await user.interact(2, command('panel'), appId, guildId);
  await until('panel_sent');
  const panel = await user.message('panel');
  Object.assign(seen, { panel_outcome: outcome, panel_components: (panel?.components ?? []).map(
    (row) => row.components.map((c) => [c.type, c.custom_id])) });
  [outcome] = await user.interact(3, { component_type: 2, custom_id: 'panel:press' }, appId, guildId, panel.id);
  await until('button_updated');
  const [, pressed] = await user.call('GET', `/channels/${channelId}/messages/${panel.id}`);
  Object.assign(seen, { button_outcome: outcome, button_content: pressed.content,
    button_kept_rows: pressed.components.length === 2, button_by_owner: seen.button_user === user.id });
  let pickId;
  [outcome, pickId] = await user.interact(3, { component_type: 3, custom_id: 'panel:pick', values: ['b', 'c'] },
    appId, guildId, panel.id);
  const picked = await user.message('picked b,c');
  Object.assign(seen, { select_outcome: outcome, select_reply: !!picked,
    select_metadata: metadataOk(picked, 3, user.id, pickId, { interacted_message_id: panel.id }) });
  let formId;
  [outcome, formId] = await user.interact(3, { component_type: 2, custom_id: 'panel:form' }, appId, guildId, panel.id);
  let [, shown] = await user.waitFor((t, d) => t === 'INTERACTION_MODAL_CREATE' && d.id === formId, 'the modal');
  Object.assign(seen, { form_outcome: outcome, modal_shown: shown.custom_id, modal_title: shown.title,
    modal_component_types: shown.components.map((c) => c.type) });
  await until('modal_sent');
  const values = { 'feedback:subject': 'the docs', 'feedback:body': 'read them twice' };
  let submitId;
  [outcome, submitId] = await user.interact(5, { id: formId, custom_id: shown.custom_id,
    components: submission(shown, values) }, appId, guildId);
  const thanks = await user.message('feedback thanks for the docs');
  Object.assign(seen, { modal_outcome: outcome, modal_reply: !!thanks,
    modal_metadata: metadataOk(thanks, 5, user.id, submitId)
      && thanks.interaction_metadata.triggering_interaction_metadata?.id === formId });

  // A command showing a modal directly.
  let surveyId;
  [outcome, surveyId] = await user.interact(2, command('survey'), appId, guildId);
  [, shown] = await user.waitFor((t, d) => t === 'INTERACTION_MODAL_CREATE' && d.id === surveyId, 'the survey');
  await until('survey_shown');
  seen.survey_outcome = outcome;
  [outcome] = await user.interact(5, { id: surveyId, custom_id: shown.custom_id,
    components: submission(shown, { 'feedback:subject': 'surveys', 'feedback:body': '' }) }, appId, guildId);
  seen.survey_submit_outcome = outcome;
  seen.survey_reply = !!(await user.message('survey thanks for surveys'));

  // Ephemeral: the invoker's session gets it; history has it for nobody;
  // a second member cannot read it.
  let secretId;
  [outcome, secretId] = await user.interact(2, command('secret'), appId, guildId);
  const [, secret] = await user.waitFor((t, d) => t === 'MESSAGE_CREATE' && d.content === 'for your eyes only',
    'the ephemeral message');
  await until('secret_reply_id');
  const name = `bystander${crypto.randomInt(1e6)}`;
  const [, other] = await user.call('POST', '/auth/register', { username: name, password: 'bystander-password' });
  const [, invite] = await user.call('POST', `/channels/${channelId}/invites`, {});
  const [joined] = await user.call('POST', `/invites/${invite.code}`, undefined, other.token);
  const [otherStatus, otherHistory] = await user.call('GET', `/channels/${channelId}/messages?limit=50`,
    undefined, other.token);
  const [otherRead] = await user.call('GET', `/channels/${channelId}/messages/${secret.id}`, undefined, other.token);
  const [, ownHistory] = await user.call('GET', `/channels/${channelId}/messages?limit=50`);
  Object.assign(seen, { secret_outcome: outcome, secret_flags: secret.flags,
    secret_metadata: metadataOk(secret, 2, user.id, secretId, { name: 'secret' }),
    secret_fetched_same: seen.secret_reply_id === secret.id,
    bystander_joined: joined === 200 && otherStatus === 200 && otherHistory.some((m) => m.content === 'hello world'),
    secret_in_bystander_history: otherHistory.some((m) => m.id === secret.id),
    secret_in_own_history: ownHistory.some((m) => m.id === secret.id),
    secret_bystander_read: otherRead });
  user.close();
}

client.once('clientReady', async () => {
  try {
    const guild = client.guilds.cache.first();
    const appId = client.application.id;
    // Registration as bots do it: bulk overwrites, global and the guild's.
    const commandRest = new REST({ api: `http://${base}/api` }).setToken(token);
    const global = [
      new SlashCommandBuilder().setName('later').setDescription('Thinks, then answers'),
      new SlashCommandBuilder().setName('panel').setDescription('Shows a panel'),
      new SlashCommandBuilder().setName('secret').setDescription('Answers only you'),
      new SlashCommandBuilder().setName('survey').setDescription('Asks you'),
    ].map((c) => c.toJSON());
    const local = [new SlashCommandBuilder().setName('hello').setDescription('Says hello')
      .addStringOption((o) => o.setName('text').setDescription('Whom to greet').setRequired(true)).toJSON()];
    const put = await commandRest.put(Routes.applicationCommands(appId), { body: global });
    const putGuild = await commandRest.put(Routes.applicationGuildCommands(appId, guild.id), { body: local });
    seen.synced = put.map((c) => c.name).sort();
    seen.synced_guild = putGuild.map((c) => c.name).sort();
    seen.guild_command_guild = putGuild[0]?.guild_id === guild.id;
    await asUser(appId, guild.id);
  } catch (error) {
    seen.error = String(error && error.stack || error);
  }
  clearTimeout(timer);
  await client.destroy();
  done('error' in seen || Object.keys(seen).some((k) => k.endsWith('_error')) ? 1 : 0);
});
client.login(token);
