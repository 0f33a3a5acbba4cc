"""DeepSeek-V2/V3 and V3.2 (the Llama-style layout with MLA, DeepSeek's MoE, the fp32
correction bias of noaux_tc routers, the MTP layer with its own vocabulary copies, and
V3.2's indexer)."""
from common import LLAMA

DECODERS = {"deepseek_v2": LLAMA, "deepseek_v3": LLAMA, "deepseek_v32": LLAMA}

REAL = {
    "deepseek-v2-lite": (15_706_484_224, "safetensors index"),
    "deepseek-v3": (671_026_419_200, "671B main model (model card: 671B + 14B MTP module = 685B); checked without the MTP layer"),
    "deepseek-v3.2": (685_396_921_376, "the FP8 checkpoint's safetensors headers (a public report lists them): 685 396 921 376 values, the MTP layer and the fp32 block scales included; checked as parameters + scales"),
}
PUBLISHED_WITH_MTP = {"deepseek-v3.2"}
HEADER_TOTALS = {"deepseek-v3.2": 0}
