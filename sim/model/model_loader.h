// Reading model architectures into ModelConfig, from three places:
//
// 1. A Hugging Face config.json, dispatched on `architectures[0]` (or `model_type` when that is
//    absent or not one we know): LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM,
//    Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen2MoeForCausalLM (its shared expert),
//    Qwen3MoeForCausalLM, OlmoeForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM (also
//    model type kimi_k2), DeepseekV32ForCausalLM (DeepSeek-V3.2: V3 with DeepSeek Sparse
//    Attention's indexer, index_n_heads / index_head_dim / index_topk), Glm4MoeForCausalLM
//    (GLM-4.5 and later: GQA with q/k/v biases and a DeepSeek-style sigmoid MoE),
//    GlmMoeDsaForCausalLM (GLM-5: MLA with the DSA indexer, some layers reusing the last one's
//    top-k by indexer_types, index_topk_pattern or index_topk_freq / index_skip_topk_offset;
//    dense layers by first_k_dense_replace or mlp_layer_types), GptOssForCausalLM, NemotronHForCausalLM (hybrid Mamba-2),
//    GPT2LMHeadModel, GPTNeoXForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM,
//    Gemma3ForCausalLM (model type gemma3_text), Llama4ForCausalLM (llama4_text: chunked
//    attention, interleaved MoE layers with a shared expert), Phi3ForCausalLM (Phi-3, Phi-4),
//    Olmo2ForCausalLM, Olmo3ForCausalLM, Qwen3NextForCausalLM, Qwen3_5ForCausalLM and
//    Qwen3_5MoeForCausalLM (Gated DeltaNet layers costed as Mamba-2 mixers of the same shape,
//    gated attention, each decoder layer two hybrid blocks); a multimodal wrapper that is none
//    of them (Gemma 3's, Llama 4's, Qwen3.5's, Kimi-K2.5's) is read from its `text_config`.
//    Only the keys that shape cost are read and the rest of the file is ignored (these files
//    carry tokenizer ids, rope scaling, quantisation, …); where a key the released files may
//    leave out is absent, the default is that of the transformers configuration class (e.g.
//    GPT-2 ties its embeddings, n_inner null means 4·n_embd; Qwen3 head_dim defaults to 128;
//    Gemma 3's vocabulary and heads); the sizes are required.
//    Sliding windows: `sliding_window` (Mistral's default 4096; Qwen2/3 only with
//    `use_sliding_window`, from `max_window_layers` on) or `layer_types` (GPT-OSS: alternate
//    layers when it is absent; Gemma 2 alternate, Gemma 3 five of every six by
//    sliding_window_pattern; OLMo 3 three of every four); Llama 4's attention_chunk_size on its
//    rope layers (no_rope_layers, or layer_types; all but every no_rope_layer_interval-th where
//    the list is absent or empty); GPT-NeoX's `use_parallel_residual` (default true) is the
//    parallel block.
//    MoE routers: DeepSeek's scoring_func, topk_method (noaux_tc: the expert bias) and
//    n_group / topk_group (DeepSeek-V2: only under group_limited_greedy); Nemotron-H's and GLM's
//    sigmoid with its bias (GLM's groups only where n_group > 1); the others a softmax.
//    Not modelled: GPT-NeoX's, GLM's and Qwen3-Next's partial rotary (no parameters), Qwen2-MoE's
//    and Qwen3-Next's shared-expert gate (one h-wide dot product a token), GPT-OSS's router bias
//    and per-head softmax offsets ("sinks"), Gemma 2's logit soft-capping and Gemma 2/3's norms
//    after attention and after the MLP, embedding dropout. Dropout probabilities: attn_pdrop /
//    resid_pdrop (GPT-2, default 0.1 each, as GPT2Config), attention_dropout / hidden_dropout
//    (GPT-NeoX), attention_dropout (the Llama family and DeepSeek-V3), resid_pdrop (Phi-3);
//    absent means 0.
// 2. The workloads' own model block, strict (an unknown key is an error):
//      { "name": "tiny", "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64,
//        "ffn": 1024, "mlp": "swiglu" | "gelu", "vocab": 32000, "tied_embeddings": false,
//        "max_sequence": 4096, "norm": "rmsnorm" | "layernorm",
//        "position_embedding": "rotary" | "learned", "qkv_bias": false,
//        "attention_output_bias": false, "mlp_bias": false, "glu_clamp": false, "qk_norm": false,
//        "attention_output_gate": false,
//        "attention_dropout": 0.0, "hidden_dropout": 0.0, "sliding_window": 0,
//        "sliding_window_layers": 1.0, "attention_chunk": 0, "attention_chunk_layers": 1.0,
//        "parallel_block": false,
//        "moe": { "experts": 8, "top_k": 2, "expert_ffn": 14336, "shared_experts": 0,
//                 "shared_expert_ffn": 14336, "first_dense_layers": 0, "layer_frequency": 1,
//                 "dense_layers": [], "latent_size": 0, "router_score": "softmax" | "sigmoid",
//                 "router_expert_bias": false, "router_groups": 0, "router_group_topk": 0 },
//        "mla": { "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
//                 "qk_rope_head_dim": 64, "v_head_dim": 128 },
//        "sparse_attention": { "index_heads": 64, "index_head_dim": 128, "topk": 2048,
//                              "shared_index_layers": [] },   (DSA; needs "mla")
//        "mtp_layers": 0, "mtp_repeated": false, "hybrid_pattern": "MEM*E",
//        "mamba": { "heads": 64, "head_dim": 64, "state": 128, "groups": 8, "conv_kernel": 4,
//                   "chunk": 128 },
//        "description": "free text" }
//    Required: name, layers, hidden, heads, vocab, max_sequence, and ffn unless every layer is
//    MoE. Defaults: kv_heads = heads, head_dim = hidden / heads, mlp swiglu, rmsnorm, rotary,
//    no biases, no dropout, shared_expert_ffn = expert_ffn, mamba groups 1, conv_kernel 4,
//    chunk 128; "mlp": "relu2" reads as "gelu" (two matrices). The meanings are those of
//    ModelConfig.
// 3. A bundled name ("llama3-70b"), which is the file <models_dir>/<name>.json.
//
// Every error is an InputError naming the file, the JSON pointer and the reason.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/json_reader.h"
#include "model/model_config.h"

namespace parallax {

/// Loads a model file: a Hugging Face config.json when the document has `architectures` or
/// `model_type`, otherwise the model block. A config.json's name is the file's stem.
ModelConfig load_model_file(const std::string& path);

/// A parsed Hugging Face config.json; `file` names it in errors, `name` becomes the model name.
ModelConfig model_from_hf_config(const nlohmann::json& doc, const std::string& file, const std::string& name);

/// The workloads' model block (schema in the header comment).
ModelConfig model_from_block(JsonReader block);

/// A workload's "model" value: an inline block (object), a bundled name, or the path of a model
/// file (a string ending in ".json", relative to the folder of the file being read).
ModelConfig read_model(JsonReader value, const std::string& models_dir);

/// Names of the bundled models in `models_dir` (the stems of its *.json files), sorted.
std::vector<std::string> bundled_model_names(const std::string& models_dir);
/// `<models_dir>/<name>.json` when it exists, else empty.
std::string bundled_model_path(const std::string& models_dir, const std::string& name);
/// The bundled model `name`; an unknown name is an InputError listing the bundled ones.
ModelConfig load_bundled_model(const std::string& models_dir, const std::string& name);

/// The `architectures` values understood by model_from_hf_config.
std::vector<std::string> supported_hf_architectures();

}  // namespace parallax
