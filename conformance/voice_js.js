// discord.js with @discordjs/voice, unmodified, with only the REST base
// changed: joinVoiceChannel, Ready, then an AudioPlayer playing an Opus
// stream of numbered frames (no encoder needed; the SFU forwards without
// decoding).
// Usage: voice_js.js HOST:PORT BOT_TOKEN GUILD_ID VOICE_CHANNEL_ID FRAMES
const { Client, GatewayIntentBits } = require('discord.js');
const voice = require('@discordjs/voice');
const { Readable } = require('node:stream');
const [base, token, guildId, channelId, framesArg] = process.argv.slice(2);
const frames = Number(framesArg);
const client = new Client({
  intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildVoiceStates],
  rest: { api: `http://${base}/api` },
});
const seen = {};
const finish = async (code) => {
  console.log(JSON.stringify(seen));
  await client.destroy();
  process.exit(code);
};
setTimeout(() => finish(1), 90000);
client.once('clientReady', async () => {
  try {
    const guild = await client.guilds.fetch(guildId);
    const started = Date.now();
    const connection = voice.joinVoiceChannel({
      channelId, guildId, adapterCreator: guild.voiceAdapterCreator, selfDeaf: true,
    });
    await voice.entersState(connection, voice.VoiceConnectionStatus.Ready, 30000);
    seen.connected = true;
    seen.connect_ms = Date.now() - started;
    const state = connection.state.networking && connection.state.networking.state;
    seen.mode = state && state.connectionData && state.connectionData.encryptionMode;
    let sent = 0;
    const stream = new Readable({
      objectMode: true,
      read() {
        if (sent >= frames) { this.push(null); return; }
        sent += 1;
        this.push(Buffer.concat([Buffer.from(`guildhall-frame-${String(sent).padStart(6, '0')}`), Buffer.alloc(40)]));
      },
    });
    const player = voice.createAudioPlayer();
    connection.subscribe(player);
    player.play(voice.createAudioResource(stream, { inputType: voice.StreamType.Opus }));
    await voice.entersState(player, voice.AudioPlayerStatus.Playing, 10000);
    await voice.entersState(player, voice.AudioPlayerStatus.Idle, frames * 20 + 20000);
    seen.played = sent;
    connection.destroy();
    seen.disconnected = true;
    await finish(sent === frames ? 0 : 1);
  } catch (error) {
    seen.error = String(error && error.stack || error);
    await finish(1);
  }
});
client.login(token);
