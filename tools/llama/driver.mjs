// Runs llama.cpp (node-llama-cpp's prebuilt CPU binding) on a GGUF model: loads it, evaluates
// a prompt, decodes N tokens greedily, and prints one JSON line with the timings and peak RSS.
//
//   node driver.mjs --model M.gguf [--prompt-tokens 32] [--tokens 32] [--ctx 512]
//                   [--threads N] [--mmap] [--pause-after K --pause-file F]
//
// The weights are read into anonymous memory (useMmap: false) unless --mmap is given: llama.cpp
// then allocates them with posix_memalign, so a malloc override (numarena run, a jemalloc or
// tcmalloc preload) decides where they live. The KV cache and compute buffers come from the
// same allocator.
//
// ttft_ms is from the start of the prompt's evaluation to the first generated token;
// ms_per_token is the mean time between the later tokens. cpu_ttft_ms and cpu_ms_per_token are
// the same spans in CPU time (user + system, every thread of the process: process.cpuUsage()):
// on a shared machine wall time also counts the time other programs held the CPU, CPU time
// counts only this process's work, including the page faults an allocator causes or saves.
// peak_rss_kb is the kernel's VmHWM.
// On failure (e.g. no memory for the weights) it prints {"ok": false, "error": ...} and exits
// with status 2.
//
// --pause-after K stops after K generated tokens, writes the process id to the file given by
// --pause-file, and waits until that file is removed before it goes on: a lab test reads the
// pages of a process that is in the middle of decoding.

import fs from "node:fs";
import process from "node:process";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

function parseArgs(argv) {
    const opts = {model: null, promptTokens: 32, tokens: 32, ctx: 512, threads: 1, mmap: false,
        pauseAfter: -1, pauseFile: null};
    const intArg = (name, v) => {
        if (v === undefined || !/^\d+$/.test(v))
            throw new Error(`${name} needs a non-negative integer, got ${JSON.stringify(v)}`);
        return Number(v);
    };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        switch (a) {
            case "--model": opts.model = argv[++i]; break;
            case "--prompt-tokens": opts.promptTokens = intArg(a, argv[++i]); break;
            case "--tokens": opts.tokens = intArg(a, argv[++i]); break;
            case "--ctx": opts.ctx = intArg(a, argv[++i]); break;
            case "--threads": opts.threads = intArg(a, argv[++i]); break;
            case "--mmap": opts.mmap = true; break;
            case "--pause-after": opts.pauseAfter = intArg(a, argv[++i]); break;
            case "--pause-file": opts.pauseFile = argv[++i]; break;
            default: throw new Error(`unknown argument ${a} (see the top of driver.mjs)`);
        }
    }
    if (!opts.model) throw new Error("--model PATH is required");
    if (opts.promptTokens < 1 || opts.tokens < 2)
        throw new Error("--prompt-tokens must be at least 1 and --tokens at least 2");
    if (opts.promptTokens + opts.tokens > opts.ctx)
        throw new Error(`--prompt-tokens + --tokens (${opts.promptTokens + opts.tokens}) ` +
            `must fit in --ctx (${opts.ctx})`);
    if ((opts.pauseAfter >= 0) !== (opts.pauseFile !== null))
        throw new Error("--pause-after and --pause-file go together");
    return opts;
}

function statusKb(field) {
    const m = fs.readFileSync("/proc/self/status", "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
    return m ? Number(m[1]) : null;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitWhileExists(file) {
    while (fs.existsSync(file)) await sleep(20);
}

async function run(opts) {
    const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true,
        progressLogs: false, logLevel: LlamaLogLevel.error});
    const t0 = performance.now();
    const model = await llama.loadModel({modelPath: opts.model, gpuLayers: 0, useMmap: opts.mmap,
        // Its estimate compares the model with the whole machine's free memory; the allocator
        // (and a numarena budget) is what must refuse, so the estimate must not pre-empt it.
        ignoreMemorySafetyChecks: true});
    const context = await model.createContext({contextSize: opts.ctx,
        batchSize: Math.min(opts.ctx, 512),
        sequences: 1, threads: opts.threads, ignoreMemorySafetyChecks: true,
        // Its default retries a failed creation with a smaller context: the size asked for
        // is the one measured (and the one a budget must refuse).
        failedCreationRemedy: false});
    const loadMs = performance.now() - t0;
    const sequence = context.getSequence();

    // A fixed prompt of the requested length: byte tokens of a repeated text, after BOS.
    const text = "numarena places memory on the right NUMA node. ".repeat(
        Math.ceil(opts.promptTokens / 8));
    const prompt = model.tokenize(text).slice(0, opts.promptTokens);
    if (prompt.length < opts.promptTokens)
        throw new Error(`the prompt tokenized to ${prompt.length} tokens, fewer than ${opts.promptTokens}`);

    const stamps = [];
    const cpuStamps = [];
    const generated = [];
    const cpuMs = () => {
        const u = process.cpuUsage();
        return (u.user + u.system) / 1000;
    };
    let cpuPaused = 0;  // CPU the pause's polling used: not decode work
    const cpuStart = cpuMs();
    const start = performance.now();
    for await (const token of sequence.evaluate(prompt, {temperature: 0})) {
        stamps.push(performance.now());
        cpuStamps.push(cpuMs() - cpuPaused);
        generated.push(token);
        if (generated.length === opts.pauseAfter) {
            const before = cpuMs();
            fs.writeFileSync(opts.pauseFile, `${process.pid}\n`);
            await waitWhileExists(opts.pauseFile);
            stamps[stamps.length - 1] = performance.now(); // the pause is not decode time
            cpuPaused += cpuMs() - before;
        }
        if (generated.length >= opts.tokens) break;
    }
    const ttft = stamps[0] - start;
    const perToken = (stamps[stamps.length - 1] - stamps[0]) / (stamps.length - 1);
    const cpuPerToken = (cpuStamps[cpuStamps.length - 1] - cpuStamps[0]) / (cpuStamps.length - 1);
    const result = {
        ok: true,
        model: opts.model,
        model_bytes: model.size,
        mmap: opts.mmap,
        threads: context.currentThreads,
        prompt_tokens: prompt.length,
        generated_tokens: generated.length,
        load_ms: round(loadMs),
        ttft_ms: round(ttft),
        ms_per_token: round(perToken),
        tokens_per_s: round(1000 / perToken),
        cpu_ttft_ms: round(cpuStamps[0] - cpuStart),
        cpu_ms_per_token: round(cpuPerToken),
        peak_rss_kb: statusKb("VmHWM"),
        rss_kb: statusKb("VmRSS"),
        first_tokens: generated.slice(0, 8),
    };
    await context.dispose();
    await model.dispose();
    await llama.dispose();
    return result;
}

function round(x) {
    return Math.round(x * 1000) / 1000;
}

let opts;
try {
    opts = parseArgs(process.argv.slice(2));
} catch (e) {
    console.error(`driver.mjs: ${e.message}`);
    process.exit(64);
}
try {
    console.log(JSON.stringify(await run(opts)));
} catch (e) {
    console.log(JSON.stringify({ok: false, model: opts.model, error: String(e?.message ?? e),
        peak_rss_kb: statusKb("VmHWM")}));
    process.exit(2);
}
