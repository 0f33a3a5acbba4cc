#!/usr/bin/env bash
# Prints the pages' budgets:
#   wasm size of each page, raw and gzip -9, each a hard failure over its ceiling (the
#   agent & sheet page is also reported against the 250 KB it aims at); a change that
#   grows a page says why and by how much in its commit;
#   first results rendered after navigation and recompute time, measured in
#   headless Chromium by the browser test `web_budgets` (tests/tests/web_page.rs),
#   which this script runs unless --size-only is given.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# Bytes of gzip -9. The dimensioner was 234.6 KB with the first estimator, 218.3 KB
# after its size cuts (no sort instances, no Unicode case tables, one JSON reader),
# 230.0 KB with the engine section, 212.8 KB once every reader (config, safetensors,
# GGUF, the Hub lookup) moved into the lazily loaded module, 216.9 KB with the one field
# table, the state-space mixers and search-as-you-type, 217.8 KB with Nemotron-3. The
# ceiling stays where those changes left it; the build's size settings (immediate-abort
# panics with std rebuilt, two wasm-opt passes skipped: scripts/build-web.sh) then took
# it to 201.1 KB (201 117 B); the engine rules, the family registry, the lookup's cancel
# and the traced basis since brought it to 215.3 KB (215 308 B; 230.1 KB with the
# previous build settings), the verdict headline to 224.2 KB (224 243 B; 241.4 KB with
# the previous settings): over this ceiling until code-level cuts bring it back.
# The verdict that checks every asked sequence under an engine (and the workload cards
# judged the same way), the bounds on llama.cpp's placement and the ways out that respect
# the engine's formats, the split and the card's fp8 took it from 217 957 to 220 253 B
# (219 984 with wasm-opt --converge): the ceiling moved to 220.5 KB for them. The engine
# rules were the next thing to load lazily, as the readers are: with every engine's rules
# in a module of their own (web/engine, loaded once the first screen is up) it went to
# 203.4 KB (203 382 B), and 206.5 KB (206 468 B) with LoRA and QLoRA derived from what
# PEFT and bitsandbytes keep and their three fields; 208.6 KB (208 603 B) with the
# first screen's questions (the engine beside the card), the parameter count started
# from the model shown, the breakdown's basis under an engine, the imported weights'
# bytes in a link and a training run's longer workloads; 212.0 KB (211 998 B) with
# llama.cpp's file types counted tensor by tensor as its quantiser types them
# (format::mix). The ceiling follows it down, with about 1 KB of room.
# Training per rank (DDP buckets, ZeRO, FSDP, offload, pipeline lines) took it to
# 220.9 KB (220 914 B): the ceiling moved to 221.5 KB until code-level cuts bring it back.
# A rank's FSDP moments, context and expert parallelism (--cp, --ep and their lines) took
# it to 225.2 KB (225 187 B): ceiling 226 KB.
# Fine-tuning as frameworks run it took it to 241.5 KB (241 467 B): the caching
# allocator's model with each framework's model setup (the reserved need, model_load)
# and the frameworks, losses and training options, after the allocator's B-tree maps
# became sorted vectors (7 KB less): ceiling 242.5 KB.
# lit-gpt 2023's own GPT (its LoRA/QLoRA step's saved tensors, Fabric's fp32 loss
# chunks, the 4-bit head) took it to 247.5 KB (247 514 B); Apple silicon's 31 rows, the
# working set and the host-memory verdict (--ram, --wired-limit-mb) to 250.4 KB
# (250 420 B); the answer's host-memory and unified-memory lines, 251.7 KB (251 701 B):
# ceiling 252.0 KB.
# Encoders and encoder-decoders answered (three facts, the BERT family, the cross-
# attention cache, the encoder output and their fields), the counted weights and KV
# of an unknown family, Mixtral's and Qwen3-MoE's experts, Gemma 2 and 3 (full, LoRA)
# and the logit soft-cap derived, transformers' device map and vLLM's CPU offload:
# 264.2 KB (264 165 B; 264 293 B with the encoder-length warning), ceiling 264.5 KB until
# code-level cuts bring it back.
# The next session: towers, per-layer inputs, the LayerNorm decoders' facts and
# derivations, fp32 compute, --memory-in-use: 269.1 KB (269 065 B); llama.cpp over
# several cards (the card list, each device's share in the answer, serialised) took
# 21.3 KB more, 290.4 KB (290 357 B) — the first thing to cut; MLX and TEI: 292.4 KB
# (292 440 B). Ceiling 293.0 KB until code-level cuts bring it back.
# Most of those 21.3 KB were Rust's float parser and printer (their code and the 10 KB
# power-of-five table), linked by --tensor-split's flag (each share read as f32 and
# printed back): the flag now checks the shares' text and keeps them as typed, the rule
# (engine module) converts them. With --max-memory kept in order as read (no sort), the
# dimensioner went from 292.4 to 272.1 KB (272 077 B); with vLLM over several cards
# (its stages and --pp-layer-partition read), 272.6 KB (272 641 B); with llama.cpp's
# --mmproj (its field, the imported projector's pairs) and Gemma 4's KV sharing (three
# facts), 275.6 KB (275 582 B); with DeepSpeed ZeRO's steps as stage_1_and_2.py and
# stage3.py hold them, 277.3 KB (277 281 B): ceiling 277.8 KB. Of what remains, about 37 KB gzip is the training estimate (estimate/training.rs,
# training/, the rank plan and the caching allocator's model): the next thing to load
# lazily, as the engine rules are.
# It moved: the training stages (the training state, the ranks' plan, the caching
# allocator's model) live in the training module (web/training), which the page loads
# when a training run is first asked about; the dimensioner estimates inference alone
# (estimate_inference, the core's stages behind a constant) and reads a training run's
# estimate back as text: 241.2 KB (241 202 B; 277.3 KB, 277 278 B, before it). With
# unsloth 2024.4's own step and torchtitan's checkpointing policy since (which alone had
# taken the dimensioner to 281.6 KB, 281 629 B, over its ceiling): 241.5 KB (241 518 B),
# ceiling 242.0 KB.
# The diffusion section (its fields, the pipeline's read, the answer's view) and each
# GPU's row in the answer over several cards took it to 251.4 KB (251 417 B). Three
# cuts that change nothing shown: each framework's description out of the defaults
# table the inference estimate reads (3.3 KB of text it carried, only the training
# stage prints it), no std runtime around a Rust `main` (the page starts from
# wasm-bindgen's start function) and GB/GiB figures printed as u64 (no u128 printer):
# 249.4 KB (249 430 B), ceiling 249.9 KB.
# The estimate itself moved out: every inference estimate and answer (the core's
# stages, the headline's searches) comes from the engine module, which the page loads
# beside its first screen anyway; the first module shows the inputs and the figures
# once that module is there: 214.2 KB (214 164 B; 249.9 KB, 249 870 B, before it),
# ceiling 214.7 KB.
# The pipeline section's revision and token fields, --card's card@total form and the
# cuBLAS workspace's line key: 216.7 KB (216 712 B), ceiling 217.2 KB.
# The pairs read by the engine module too (read: each refused pair's message at its
# field, the engine chosen and the cards split over, the preset the shape is; line: the
# answer's line of inputs): the first module links no parser of the pairs (params'
# readers, the engine flags', the storage formats', their messages) and no preset
# matching by the parsed shape: 188.6 KB (188 628 B), ceiling 189.1 KB (code 461.6 →
# 411.9 KB raw, data 89.4 → 75.8 KB). What remains, by twiggy over this code built
# unstripped (raw bytes before gzip): Leptos (tachys 59 KB, reactive_graph 30 KB and
# its instantiations in each component), the results components (results.rs: 47 KB;
# the answer's reader 12 KB, the estimate document's 6 KB), the inputs panel (39 KB),
# the app's view (28 KB), the import zone (13 KB), the diffusion section (9 KB), the
# engine section (8 KB), alloc and core (60 KB), and 76 KB of data (the field table's
# labels and help: about 22 KB).
# A pipeline folder picked or dropped on the page (the pipeline section's drop zone and
# its call into the diffusion module; the reading itself is the diffusion module's) and
# one settle of the engine flags: 190.8 KB (190 826 B), ceiling 191.4 KB.
# The results drawn by the engine module: the answer, the workload cards' figures, the
# headline figures, chart, lines and per-card fit table, the engine section and the
# sweep's rows come from it as markup (web/engine's view, from the estimate and answer
# documents the modules wrote; the fields and the buttons stay here), and an estimate
# document is read here for its figures alone (gpumem_proto::training::read_figures):
# the first module links no formatting of an estimate or a headline, no reader of the
# answer or the engine section, no reader of an estimate's lines: 159.7 KB
# (159 729 B, 419 791 B raw; 190.8 KB, 190 822 B, 506 600 B raw, before it; 161.3 KB
# with the drawing moved and every estimate document still read whole). With the
# one reader of the engine flags and the cards' interconnect since (160.3 KB,
# 160 283 B) and the command line in the engine module's words too (command_view):
# 159.1 KB (159 111 B), ceiling 159.6 KB, under the 160 KB the first module aims at.
# The fact rows for LayerNorm decoders' dropouts, activations and layouts and for the
# buffers counted since (GPT-J's sin/cos tables, Gemma's embedding scales, Falcon-H1's
# muP vectors, towers' rotary tables), eleven rows of the field table: 159.9 KB
# (159 918 B), ceiling 160.0 KB, the aim itself.
# Fields for what the command gained (group offloading's four in the pipeline section,
# vLLM's --data-parallel-size and --enable-expert-parallel, the compressed-tensors
# switch the config reader sets): 160.3 KB (160 315 B), ceiling 160.8 KB, over the aim
# by those rows until code-level cuts bring it back.
# The vision tower's shape (fourteen tower-* rows read from vision_config) and two MoE
# router facts (router-casts, router-fp32-logits): 161.2 KB (161 188 B), ceiling
# 161.7 KB.
# The towers' and the audio tower's new shape rows (Gemma 4's pooling, head size, key/value
# heads and clipped projections; the audio tower's width, layers, heads, MLP, mel bins,
# frames and the conformer's chunking, convolutions and output), the clip's field
# (mm-audio-seconds) and Llama 4's dispatch fact: 162.2 KB (162 226 B), ceiling 162.7 KB.
DIMENSIONER_BUDGET=162726
# The agent & sheet page: reported against 250 KB, not enforced while it is above it.
# It was 296.2 KB; reading the workload document from an owned JSON value (as the wire
# messages are: one deserializer per type, not a second over &Value) and every JSON text
# from bytes (one text reader) brought it to 292.7 KB; reading structs from objects only
# (gpumem_proto::json::from_value: no array reader per struct) to 280.1 KB; the build's
# size settings to 261.4 KB (261 391 B), the features since to 270.5 KB (270 513 B;
# 289.1 KB with the previous build settings). What remains over 250 KB is the serde code of the
# wire, sheet and workload types and the panels' views.
AGENT_PAGE_BUDGET=250000
# Until it is under 250 KB, a hard ceiling keeps it from growing back: 280.1 KB reached
# before the build's size settings, rounded up by about 1 KB; LoRA and QLoRA derived
# from what PEFT and bitsandbytes keep (the estimator the page replays against) took it
# from 279.3 to 282.0 KB (282 046 B), the shared state's imported-weights key and a
# training run's longer workloads to 282.6 KB (282 563 B), llama.cpp's file-type mixes
# to 285.9 KB (285 936 B): the ceiling moved to 286.5 KB.
# Training per rank and current vLLM took it to 293.9 KB (293 878 B): ceiling 294.5 KB.
# A rank's FSDP moments, --cp and --ep took it to 297.8 KB (297 798 B): ceiling 298.5 KB.
# Fine-tuning as frameworks run it (the allocator's model, model_load, the frameworks,
# losses and options) took it to 314.0 KB (314 006 B): ceiling 315.0 KB.
# The allocator history on the page (its timeline and peak breakdown written as markup
# from the document's JSON, no deserializer per shape; the table's history column) took
# it from 314.0 to about 322 KB; with the engines behind one contract and the facts as
# rows, 322.9 KB (322 924 B); with lit-gpt 2023's own GPT, 328.4 KB (328 401 B):
# with Apple silicon and the host-memory verdict, 330.1 KB (330 106 B); with llama.cpp's
# chosen placement, accelerate's device map and Unsloth 2024.4, 330.8 KB (330 789 B):
# ceiling 331.5 KB.
# The same session's encoders, encoder-decoders, counted families, MoE and Gemma
# derivations, device map and CPU offload: 342.6 KB (342 633 B), ceiling 343.0 KB.
# The next session's towers, facts, derivations, several cards, MLX and TEI: 356.1 KB
# (356 114 B; 347.2 KB before several cards): ceiling 356.5 KB.
# --tensor-split read by its text (no float parser or printer of f32) and --max-memory
# kept in order as read: 350.5 KB (350 457 B); vLLM over several cards: 351.0 KB
# (350 981 B); --mmproj and Gemma 4's KV sharing: 353.7 KB (353 701 B); ZeRO's steps:
# 355.2 KB (355 217 B), ceiling 355.7 KB.
# The training module's move (this page keeps every stage; the dimensioner's benchmark
# hook left its library): 355.1 KB (355 099 B). unsloth 2024.4's own step, the
# checkpointing policy and the engines' rules since: 359.3 KB (359 321 B; 359 369 B
# before the move), ceiling 359.8 KB.
# Measured with the day's additions (not traced one by one) and GB/GiB figures printed
# as u64 (no u128 printer): 360.4 KB (360 443 B), ceiling 360.9 KB.
# FSDP1's streams replayed through the allocator, transformers 4.39's step, the cuBLAS
# workspaces, the hybrid mixers, shared blocks, cross-attention layers and towers the
# reader counts: 371.1 KB (371 115 B), ceiling 371.6 KB.
# The pairs' reading in the form the dimensioner's engine module gives it
# (compute::Full::read: the fields' messages and the engine's routing as a Reading):
# 371.8 KB (371 828 B; 371 104 B before it), ceiling 372.3 KB.
# The same folder drop, the encoder-decoder count's lines, the state layout by
# runtime: 375.4 KB (375 371 B), ceiling 375.9 KB.
# The one reader of the inputs (engine keys settled on every path), the cards'
# interconnect, JetMoE/GPT-1/CTRL with the buffers line, foreach AdamW's temporaries in
# the allocator model: 378.3 KB (378 330 B), ceiling 378.8 KB.
# The rotary embeddings' buffers (two fact rows), ModernBERT-decoder's prediction head,
# GIT's prefix tokens, Whisper's placement over tp, caches measured at their lengths,
# LoRA derived on GPT-2 and GPT-NeoX: 385.9 KB (385 871 B). Beam search's copies
# (--beams): 387.2 KB (387 187 B), ceiling 387.7 KB.
# StarCoder 2, Phi, OPT and Falcon-7B's and Qwen2-MoE's shared expert's training
# activations derived, the buffers counted since (eleven fact rows), bitsandbytes'
# kernels at the prefill: 390.9 KB (390 900 B), ceiling 391.4 KB.
# The weights under transformers (bitsandbytes leaving an MoE's experts in 16 bits,
# fp8 dequantised below compute capability 8.9, compressed-tensors decompressed at the
# first forward), vLLM's and TGI's bitsandbytes profiles, Whisper under vLLM, vLLM's
# data and expert parallelism, LoRA on the LayerNorm families derived, diffusers' group
# offloading: 394.3 KB (394 255 B); DeepSeek-V2's and V3's latent attention and MoE
# derived (the group-limited router's fact row): 395.5 KB (395 519 B), ceiling 396.0 KB.
# LLM.int8's scratch in vLLM's and TGI's profiles and under transformers, gpt-oss's
# full fine-tune and LoRA derived, the vision towers' forward (Gemma 3, PaliGemma,
# Qwen2.5/3-VL, Qwen3.5, Llama 4), the MoE prefill derived, the whole pipeline's group
# offloading, PEFT's stacked-expert adapters: 407.7 KB (407 698 B), ceiling 408.2 KB.
# Gemma 4's vision tower and the audio towers' forward (Qwen2-Audio, Gemma 4's
# conformer), the merge into the prompt's embeddings, compressed-tensors' decompression
# moment, the text prefills of Gemma 2/3, the Qwen-VL models and Llama 4 derived, QLoRA's
# activations under PEFT's fp32 preparation (dense and MoE), Qwen2-VL's reader, vLLM's
# audio profile: 424.0 KB (423 978 B), ceiling 424.5 KB.
# The training activations derived for Falcon-40B, Falcon2-11B, Falcon-RW, BLOOM,
# StableLM, GPTBigCode, OPT-350m and Phi's q/k LayerNorms, QLoRA under eager attention
# and over Qwen2-MoE's shared expert, vLLM 0.29's rules (Model Runner V2's graph
# estimate), ROCm's fp8 row padding, the image prompt's and SDPA's mask-building
# moments: 427.6 KB (427 575 B), ceiling 428.1 KB.
AGENT_PAGE_CEILING=428075
# The lazily loaded readers were 120.6 KB when they moved out of the dimensioner, 122.8 KB
# with the lookup for mirrors without a file listing, 126.9 KB with the model search,
# 131.1 KB with the state-space mixers' config reader, 133.4 KB with the readers of
# Falcon-H1, Bamba and GraniteMoeHybrid (their Mamba-2 keys, layer maps and notes);
# the listing's pages and split GGUF models (recursive listing followed through its Link
# pages, split sets as one choice and their headers checked, the page's words when it
# cannot see further pages) added 4.5 KB on their own (131.7 → 136.2 KB); both: 137.9 KB;
# Nemotron-3's MoE blocks (and layers_block_type) 139.0 KB (138 979 B), rounded up by 1 KB.
# The build's size settings took it to 121.4 KB (121 354 B); 122.5 KB (122 488 B) with
# the features since (138.3 KB with the previous build settings).
# Eight towers counted in their families' files and MLX's quantisation read: 140.0 KB
# (140 042 B), ceiling 140.5 KB.
# The mmproj GGUF's header read (the projector's kind and pairs, an mmproj record) and
# Gemma 4's KV-sharing keys: 142.8 KB (142 773 B), ceiling 143.3 KB.
# Five family records (Qwen-1, ChatGLM, GLM-4 dense, Cohere, Hunyuan dense) and the
# layer bound: 144.4 KB (144 354 B), ceiling 144.9 KB.
# 152.0 KB (152 020 B) with the families swept against transformers' defaults (about
# twenty family records, bare Infinity/NaN read, Nemotron-H's and GraniteMoeHybrid's
# layer kinds: the 7.7 KB since 144.3 KB), 151.5 KB (151 503 B) with GB/GiB figures
# printed as u64, then 153.6 KB (153 644 B) with Phi/GPT-J/OPT/BLOOM exact and the
# CodeGen, BioGPT, Persimmon, BitNet and Cohere2-MoE records (three facts): ceiling
# 154.1 KB.
# The hybrid mixers (short convolutions, lightning attention, RG-LRU, RWKV), Zamba's
# shared blocks, Mllama's cross-attention layers and the GOT-OCR 2.0, Gemma 4 audio
# and Phi-4-multimodal towers: 161.8 KB (161 822 B), ceiling 162.3 KB.
# The state and indexer layouts by runtime (transformers' fp32 states, bf16 indexer
# keys), the counted encoder-decoders' cross-attention and encoder-output lines, the
# Phi-4-multimodal audio conformer and GIT: 164.5 KB (164 459 B), ceiling 165.0 KB.
# JetMoE's attention experts, GPT-1's missing final norm and mask buffers, CTRL's
# unsaved fp32 sinusoid table (four fact rows and the buffers line), the cross-attention
# cache split over tp: 165.7 KB (165 709 B), ceiling 166.2 KB.
# The rotary embeddings' buffers in every family record (two fact rows, the tables per
# layer type), ModernBERT-decoder's prediction head, ModernVBERT's tower, GIT's prefix
# tokens, Whisper's placement over tp, caches measured at their lengths: 170.8 KB
# (170 781 B), ceiling 171.3 KB.
# The buffers counted since in the family records (GPT-J's and CodeGen's sin/cos
# tables, Gemma's scales, Falcon-H1's muP vectors, towers' rotary tables) and the
# LayerNorm families' new facts: 172.0 KB (172 025 B), ceiling 172.5 KB.
# The MoE fact row for group-limited routers (read from a config's topk_method) and
# the compressed-tensors switch the config reader sets: 172.8 KB (172 819 B), ceiling
# 173.3 KB.
# The vision tower's fourteen shape rows and the two MoE router facts, with the
# config reader's tower keys: 176.4 KB (176 411 B), ceiling 176.9 KB.
# Qwen2-VL's reader, Gemma 4's tower and conformer shapes, Qwen2-Audio's, Llama 4's
# dispatch fact and the new fact rows: 180.9 KB (180 901 B), ceiling 181.4 KB.
LOOKUP_BUDGET=181401
# The engine module (web/engine): the serving engines' rules, speculative decoding and
# llama.cpp's placement, with the estimator they run on, moved out of the dimensioner:
# 97.9 KB (97 945 B) when it moved, 111.1 KB (111 136 B) with speculative decoding on
# the page and the rules of vLLM 0.7, 0.8 and 0.27, TGI 0.9 and 2.0 and SGLang 0.5,
# 115.0 KB (115 046 B) with llama.cpp's file-type mixes; the ceiling leaves about 3 KB
# for the next releases' rules.
# llama.cpp -ot matched in this module (regex-lite) and current vLLM's rules took it to
# 147.7 KB (147 651 B): ceiling 148.5 KB (a lazily loaded feature, not refused).
# A rank's FSDP moments, --cp and --ep in the estimator it carries: 151.1 KB (151 075 B),
# ceiling 152 KB.
# Fine-tuning as frameworks run it (the estimator it carries: the allocator's model,
# model_load, the frameworks, losses and options) took it to 167.4 KB (167 390 B):
# ceiling 168.0 KB.
# The engines behind one contract (each engine's rule its own function, the registry's
# tables) and LMDeploy's TurboMind, the sixth engine (its rule, lines and words: about
# 3.1 KB of it), took it to 171.0 KB (171 031 B): ceiling 171.5 KB (a lazily loaded
# engine, not refused). The dimensioner (242.1 KB, 242 053 B) and the agent page
# (314.8 KB, 314 789 B) stayed under theirs with its flags in the form.
# The facts as rows (their table spliced into the field table, the accessors and the
# rules copied at compile time) and OLMo's non-parametric norms: 171.7 KB (171 744 B),
# ceiling 172.5 KB; lit-gpt 2023's own GPT: 176.8 KB (176 807 B), ceiling 177.5 KB; Apple silicon and the host-memory verdict: 179.5 KB (179 507 B),
# ceiling 180.0 KB; llama.cpp's chosen placement, accelerate's device map and Unsloth
# 2024.4: 180.8 KB (180 803 B), ceiling 181.5 KB.
# transformers' device_map="auto" planned (accelerate's map, transformers' balanced
# memory, --max-memory), vLLM's --cpu-offload-gb chosen, vLLM 0.6.4's accounting, TGI 3's
# warm-up logits, and the core's new lines (encoders, encoder-decoders, MoE, Gemma):
# 194.3 KB (194 295 B), ceiling 194.5 KB (a lazily loaded module, not refused).
# The next session: 200.5 KB (200 535 B) with the core's new lines and --memory-in-use;
# llama.cpp over several cards (its split rule, each device's rows) 228.2 KB (228 221 B);
# MLX's and TEI's rules, the sixth and seventh engine folders: 242.9 KB (242 915 B),
# ceiling 243.5 KB (a lazily loaded module, not refused).
# vLLM over several unequal cards (its pipeline stages, each GPU's pool for its
# stage's layers, --pp-layer-partition): 246.7 KB (246 717 B; 242.0 KB, 242 012 B,
# before it); llama.cpp's --mmproj (the projector's weights and compute buffer, on
# device 0 over several cards) and Gemma 4's KV sharing: 251.4 KB (251 370 B); ZeRO's
# steps in the estimator it carries: 252.4 KB (252 394 B), ceiling 252.9 KB (a lazily
# loaded module, not refused).
# The core's two estimate entry points (every stage, or inference's without the
# training stages) and the headline's searches estimating through their rule:
# 253.3 KB (253 279 B; 252.4 KB, 252 432 B, before them). TGI 3's and SGLang's newer
# rules and unsloth 2024.4's step in the estimator it carries: 258.5 KB (258 489 B;
# 258 281 B without the entry points), ceiling 259.0 KB.
# Measured with the day's additions (not traced one by one) and GB/GiB figures printed
# as u64 (no u128 printer): 260.4 KB (260 428 B), ceiling 260.9 KB.
# The dimensioner's estimator since (its inference estimate written back as text, the
# answer without an engine): 264.1 KB (264 135 B; 260.9 KB, 260 897 B, before it),
# ceiling 264.6 KB (a lazily loaded module, not refused).
# FSDP1's streams replayed through the allocator, transformers 4.39's step, the cuBLAS
# workspaces, the new mixers and towers, the CUDA context by card: 274.3 KB
# (274 254 B), ceiling 274.8 KB (a lazily loaded module, not refused).
# The dimensioner's reading of the pairs (read: the fields' messages, the engine's
# routing, the preset by its parsed shape and the presets' table; line: the answer's
# line of inputs), moved here from the first module: 279.2 KB (279 228 B), ceiling
# 279.7 KB (a lazily loaded module, not refused).
# Mllama's cross-attention layers as each engine lays them out, the weights' allocator
# segments of SGLang and vLLM 0.27 / 0.8 / 0.6.4, the state layouts by runtime, the
# counted encoder-decoders: 286.1 KB (286 078 B), ceiling 286.6 KB.
# The dimensioner's results drawn here as markup (view.rs: the answer, the cards'
# figures, the breakdown, the engine section, the sweep's rows), with the readers of
# the answer and estimate documents the page hands back: 303.2 KB (303 220 B;
# 286.4 KB, 286 362 B, before it). With the one reader of the engine flags, the
# interconnect's communicators, JetMoE, GPT-1 and CTRL since (306.5 KB, 306 520 B) and
# the page's command line (command_view): 307.8 KB (307 756 B), ceiling 308.3 KB (a
# lazily loaded module, not refused).
# The rotary buffers (and the engines leaving them out), the new facts' rows, GIT's
# prefix tokens refused by every engine, a measured cache refused per token, an engine
# line's inputs collected into their map (the core no longer shaped by the page's
# bytes): 315.6 KB (315 587 B). Beam search's copies (refused by every engine's rule):
# 316.9 KB (316 875 B), ceiling 317.4 KB (a lazily loaded module).
# The buffers counted since (and which of them each engine leaves out), the new fact
# rows, bitsandbytes' kernels at the prefill (a line of its own), the presets' shapes
# read once: 320.9 KB (320 942 B), ceiling 321.4 KB.
# Whisper on vLLM's V1 engine (its two KV-cache groups, the encoder's profile), vLLM's
# data and expert parallelism (one rank's experts, the gathered MoE rows), vLLM's and
# TGI's bitsandbytes dequantisation in their profiles, the weights' rules under
# transformers (MoE experts under bitsandbytes, fp8 below 8.9, compressed-tensors):
# 331.9 KB (331 932 B); with DeepSeek's derivations and their fact row 333.7 KB
# (333 660 B), ceiling 334.2 KB (a lazily loaded module).
# LLM.int8's scratch in vLLM's profile and TGI's warm-up (closed form and replays),
# the GPTQ/AWQ MoE rule under transformers, the vision towers' forward phase, the MoE
# prefill derived from grouped_mm, gpt-oss's derivations, PEFT's stacked-expert
# adapters: 348.3 KB (348 252 B), ceiling 348.8 KB (a lazily loaded module).
# The inference stages the module runs: Gemma 4's tower, the audio towers, the merge
# moment, compressed-tensors' decompression, the Gemma 2/3, Qwen-VL and Llama 4 text
# prefills derived, vLLM's audio profile: 365.4 KB (365 390 B), ceiling 365.9 KB (a
# lazily loaded module).
# vLLM 0.29's rules (Model Runner V2's CUDA-graph estimate by release), ROCm's fp8 row
# padding, the image prompt's masks and SDPA's mask-building moment in the prefill,
# generate's attention mask: 370.1 KB (370 105 B), ceiling 370.6 KB.
ENGINE_BUDGET=370605
# The training module (web/training): the training estimator (the training state, the
# ranks' plan, the caching allocator's model, with the estimator they run on), moved out
# of the dimensioner (36.1 KB of it, 277.3 → 241.2 KB), with the text documents it
# answers in (the estimate, every line; the answer without an engine): 145.5 KB
# (145 489 B) when it moved; 149.6 KB (149 563 B) with unsloth 2024.4's own step,
# ceiling 150.1 KB.
# Measured with the day's additions (not traced one by one), the framework descriptions
# read by its training stage alone and GB/GiB figures printed as u64: 151.2 KB
# (151 161 B), ceiling 151.7 KB.
# FSDP1's three streams replayed through the caching allocator (torchtune 0.1),
# transformers 4.39's step and the cuBLAS workspaces: 161.8 KB (161 766 B), ceiling
# 162.3 KB.
# FSDP1's LoRA replay, the cuBLAS workspaces by the card's generation, transformers
# 4.36, the state layouts by runtime: 165.6 KB (165 553 B), ceiling 166.1 KB.
# The one reader of the inputs (inputs::read, engine keys settled on every path),
# foreach AdamW's small temporaries placed in the allocator model, the cards'
# interconnect and the new families' facts: 167.7 KB (167 745 B), ceiling 168.2 KB.
# LoRA on GPT-2 and GPT-NeoX derived from their code (frozen LayerNorms, PEFT's fp32
# adapters, GELU's saves), the rotary buffers kept whole under ZeRO and FSDP, the new
# facts' rows: 173.0 KB (172 985 B). Beam search's copies (--beams, refused for
# training): 174.7 KB (174 702 B), ceiling 175.2 KB.
# StarCoder 2's, Phi's, OPT's and Falcon-7B's activations derived tensor by tensor,
# Qwen2-MoE's gated shared expert, the checkpointed layers' saved arguments, the
# buffers counted since: 177.6 KB (177 600 B), ceiling 178.1 KB.
# LoRA on StarCoder 2, Phi, OPT and Falcon-7B derived tensor by tensor, the weights'
# rules under transformers (an MoE's experts under bitsandbytes, fp8 below compute
# capability 8.9, compressed-tensors decompressed): 181.0 KB (181 034 B);
# DeepSeek-V2's and V3's latent attention, routers and MoE derived tensor by tensor:
# 182.0 KB (182 044 B), ceiling 182.5 KB.
# gpt-oss's full fine-tune and LoRA derived tensor by tensor (sinks, clamped SwiGLU
# experts, biased router), the MoE prefill and the vision towers' forward (the
# estimator the module runs on), PEFT's stacked-expert and latent-attention adapters:
# 194.3 KB (194 307 B), ceiling 194.8 KB.
# QLoRA's activations under PEFT's preparation (dense and MoE), and the estimator's
# new inference stages it links (towers, audio, decompression, the derived prefills;
# they return at once for a training run, but the module calls the one estimate):
# 210.7 KB (210 726 B), ceiling 211.2 KB.
# It carries only the training stages now (estimate_training: no prefill, towers,
# audio or decompression, as the engine module carries only inference's) and judges
# its searches by them (headline::ByTraining): 183.4 KB (183 437 B), ceiling 183.9 KB.
# The activations derived for eight more LayerNorm layouts (Falcon-40B, Falcon2-11B,
# Falcon-RW, BLOOM, StableLM, GPTBigCode, OPT-350m, Phi's q/k LayerNorms) and QLoRA's
# under eager attention and over Qwen2-MoE's shared expert: 185.8 KB (185 802 B),
# ceiling 186.3 KB.
TRAINING_BUDGET=186302
# The diffusion module (web/diffusion): a diffusers pipeline's files read from the Hub
# (the lookup module's HTTP client, linked without its exports) and its answer (the
# pipeline's reader and its JSON, each component's count, the activations, the
# command's lines), fetched when a pipeline is first read: 89.6 KB (89 564 B) when it
# came, ceiling 90.1 KB.
# With its own reads and GB/GiB figures printed as u64: 89.1 KB (89 119 B), ceiling
# 89.6 KB.
# A pipeline folder from the user's disk (its paths chosen, each config read bounded
# through File.text, a dropped folder walked) and the peak's cuDNN workspace note:
# 94.7 KB (94 716 B), ceiling 95.2 KB.
# Layerwise casting (each denoiser's skipped modules, its flag and refusals) and the
# loading phase of bitsandbytes-quantized components under offload: 96.4 KB (96 372 B),
# ceiling 96.9 KB.
# Group offloading of the denoiser (each top-level ModuleList element counted apart,
# the block and leaf levels' resident bytes, their refusals, the fourth offload line):
# 100.4 KB (100 428 B), ceiling 100.9 KB. Its form fields are not on the page: they
# took the dimensioner to 160 004 B, over its 160 KB ceiling.
# The whole pipeline's group offloading (each component's resident bytes, the VAE's
# block modules, the text encoders' leaf level) and LLM.int8's quantisation copies:
# 102.2 KB (102 219 B), ceiling 102.7 KB.
DIFFUSION_BUDGET=102719
fail=0
report() { # report LABEL DIR BUDGET HARD(yes|no)
  local label="$1" dir="$2" budget="$3" hard="$4" wasm js raw gz jsgz verdict
  wasm="$(ls "$dir"/*.wasm 2>/dev/null | head -1 || true)"
  [ -n "$wasm" ] || { echo "web-budgets: no .wasm in $dir/; run scripts/build-web.sh" >&2; fail=1; return; }
  raw=$(stat -c %s "$wasm")
  gz=$(gzip -9 -c "$wasm" | wc -c)
  js="$(ls "$dir"/*.js | head -1)"
  jsgz=$(gzip -9 -c "$js" | wc -c)
  printf 'web-budgets: %s wasm %s: %d B raw, %d B gzip (%.1f KB; budget %.1f KB, aim 150 KB)\n' \
    "$label" "$(basename "$wasm")" "$raw" "$gz" "$(echo "$gz / 1000" | bc -l)" "$(echo "$budget / 1000" | bc -l)"
  printf 'web-budgets: %s js glue: %d B gzip\n' "$label" "$jsgz"
  if [ "$gz" -gt "$budget" ]; then
    verdict="$(echo "($gz - $budget) / 1000" | bc -l)"
    if [ "$hard" = yes ]; then
      printf 'web-budgets: FAIL %s wasm over its %d B gzip budget by %.1f KB\n' "$label" "$budget" "$verdict" >&2; fail=1
    else
      printf 'web-budgets: WARN %s wasm over its %d B gzip budget by %.1f KB (reported, not enforced)\n' "$label" "$budget" "$verdict" >&2
    fi
  fi
}
report dimensioner dist "$DIMENSIONER_BUDGET" yes
report "agent page" dist/agent "$AGENT_PAGE_BUDGET" no
report "agent page (ceiling)" dist/agent "$AGENT_PAGE_CEILING" yes
# The readers (files and Hub lookup), fetched only on the first import or lookup.
lookup_dir="$(ls -d dist/lookup-*/ 2>/dev/null | head -1 || true)"
[ -n "$lookup_dir" ] || { echo "web-budgets: no dist/lookup-*/; run scripts/build-web.sh" >&2; fail=1; }
[ -z "$lookup_dir" ] || report "lookup module (lazy)" "${lookup_dir%/}" "$LOOKUP_BUDGET" yes
# The engine rules, fetched once the first screen is up.
engine_dir="$(ls -d dist/engine-*/ 2>/dev/null | head -1 || true)"
[ -n "$engine_dir" ] || { echo "web-budgets: no dist/engine-*/; run scripts/build-web.sh" >&2; fail=1; }
[ -z "$engine_dir" ] || report "engine module (lazy)" "${engine_dir%/}" "$ENGINE_BUDGET" yes
# The training estimator, fetched when a training run is first asked about.
training_dir="$(ls -d dist/training-*/ 2>/dev/null | head -1 || true)"
[ -n "$training_dir" ] || { echo "web-budgets: no dist/training-*/; run scripts/build-web.sh" >&2; fail=1; }
[ -z "$training_dir" ] || report "training module (lazy)" "${training_dir%/}" "$TRAINING_BUDGET" yes
# The diffusion estimator, fetched when a diffusers pipeline is first read.
diffusion_dir="$(ls -d dist/diffusion-*/ 2>/dev/null | head -1 || true)"
[ -n "$diffusion_dir" ] || { echo "web-budgets: no dist/diffusion-*/; run scripts/build-web.sh" >&2; fail=1; }
[ -z "$diffusion_dir" ] || report "diffusion module (lazy)" "${diffusion_dir%/}" "$DIFFUSION_BUDGET" yes
[ "$fail" = 0 ] || exit 1
[ "${1:-}" = "--size-only" ] && exit 0
# Timings need the browser: the test prints them (and fails over budget).
cargo test -q -p gpumem-e2e --test web_page web_budgets -- --nocapture 2>&1 | grep -E 'web-budgets|SKIPPED|test result|panicked' || true
