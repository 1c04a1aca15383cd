"""``hf-seq-demo RUN_DIR``: a Gradio page for a trained model folder, chosen by the folder's head.

=====================  ======================================================================================
head (architectures)   page
=====================  ======================================================================================
...ForSequenceClass.   text → the probability of each label
...ForTokenClass.      the sentence with each token's tag highlighted
...ForCausalLM         prompt → several samples side by side (greedy or sampling: temperature, top-k, top-p, seed)
...ForConditionalGen.  source → the n-best beam hypotheses with their scores, and the cross-attention heat map of
                       the chosen one (an RNN's attention weights; a Transformer's per layer and head, or averaged)
...ForMaskedLM         fill-in-the-[MASK]: the top-k tokens and their probabilities
=====================  ======================================================================================

An engine switch appears where an export of the folder sits next to it (``hf-seq-export onnx`` /
``hf-seq-export ctranslate2`` into a sub-folder or a sibling ``RUN_DIR-<name>``): PyTorch, ONNX Runtime,
CTranslate2. Bad input (empty text, more tokens than the model's positions, no ``[MASK]``) is a message on the page.

``hf-seq-demo RUN_DIR --write-space DIR`` writes a Hugging Face Space (``app.py``, ``requirements.txt``, ``README.md``
with its metadata, and this file as ``hf_seq_demo.py``) that serves the same page from the model folder through
transformers' remote code alone: hf_seq need not be installed there.

This file imports only the standard library, torch, transformers and Gradio at its top (the Space carries it);
hf_seq's own modules (the export engines) are imported where used.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
from pathlib import Path

# Gradio sends usage statistics and checks for a new release unless told not to
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

# the class-name endings of ``config.architectures`` -> the page; the Auto class that loads the head
HEADS = {
    "ForSequenceClassification": ("classifier", AutoModelForSequenceClassification),
    "ForTokenClassification": ("tagger", AutoModelForTokenClassification),
    "ForCausalLM": ("language model", AutoModelForCausalLM),
    "ForConditionalGeneration": ("translator", AutoModelForSeq2SeqLM),
    "ForMaskedLM": ("masked language model", AutoModelForMaskedLM),
    "ForPreTraining": ("masked language model", AutoModelForMaskedLM),
}
ENGINES = ("PyTorch", "ONNX Runtime", "CTranslate2")
# the engines each head can run on (an export of another head is not offered)
ENGINE_KINDS = {
    "ONNX Runtime": {"classifier", "tagger", "language model", "translator"},
    "CTranslate2": {"translator"},
}
MAX_SAMPLES = 4  # the language model's samples side by side
AVERAGE = "average"


class DemoInputError(ValueError):
    """Input the model cannot take (empty, too long, no mask token): shown on the page as a message."""


def head_of(config) -> str:
    """The page of a config: ``"classifier"``, ``"tagger"``, ``"language model"``, ``"translator"`` or ``"masked
    language model"``, from the class its folder was saved from (``config.architectures``)."""
    for name in getattr(config, "architectures", None) or []:
        for ending, (head, _) in HEADS.items():
            if name.endswith(ending):
                return head
    raise ValueError(
        f"the folder's config.json names architectures {getattr(config, 'architectures', None)}; hf-seq-demo serves "
        f"models whose class name ends in one of {sorted(HEADS)}"
    )


def find_exports(folder: str | os.PathLike) -> dict[str, Path]:
    """``{engine: export folder}`` of the exports next to ``folder``: its sub-folders and its siblings named
    ``<folder name>-<anything>`` that hold ``hf_seq_onnx.json`` (ONNX Runtime) or a CTranslate2 ``model.bin`` with
    ``hf_seq_export.json``."""
    folder = Path(folder).resolve()
    candidates = [p for p in sorted(folder.iterdir()) if p.is_dir()]
    if folder.parent.is_dir():
        candidates += [p for p in sorted(folder.parent.glob(f"{folder.name}-*")) if p.is_dir()]
    found: dict[str, Path] = {}
    for path in candidates:
        if (path / "hf_seq_onnx.json").is_file():
            found.setdefault("ONNX Runtime", path)
        elif (path / "model.bin").is_file() and (path / "hf_seq_export.json").is_file():
            found.setdefault("CTranslate2", path)
    return found


class Demo:
    """The model side of the page, without Gradio: each method takes the page's inputs and returns its outputs.

    ``folder``: a saved model folder (model, config, tokenizer); loaded with ``trust_remote_code=True`` (the folder's
    own modelling code where hf_seq is not imported). ``exports``: ``{engine: folder}`` (default: :func:`find_exports`).
    """

    def __init__(self, folder: str | os.PathLike, exports: dict[str, Path] | None = None):
        self.folder = str(folder)
        self.config = AutoConfig.from_pretrained(self.folder, trust_remote_code=True)
        self.head = head_of(self.config)
        auto = next(cls for ending, (head, cls) in HEADS.items() if head == self.head)
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder, trust_remote_code=True)
        self.model = auto.from_pretrained(self.folder, trust_remote_code=True, attn_implementation="eager").eval()
        exports = find_exports(self.folder) if exports is None else exports
        self.exports = {e: Path(p) for e, p in exports.items() if self.head in ENGINE_KINDS.get(e, ())}
        self.engines = ["PyTorch", *[e for e in ENGINES if e in self.exports]]
        self._loaded: dict[str, object] = {"PyTorch": self.model}
        self._seeded = threading.Lock()  # the page answers requests in threads: one seeded generation at a time

    # ---- what the page says it serves
    @property
    def title(self) -> str:
        name = Path(self.folder.rstrip("/")).name or self.folder
        return f"{name}: {type(self.model).__name__} ({self.config.model_type}), {self.head}"

    def max_length(self) -> int | None:
        """The most input tokens the model's positions allow (None: a recurrent model, no limit)."""
        limit = getattr(self.config, "max_position_embeddings", None)
        return int(limit) if limit else None

    # ---- engines
    def engine(self, name: str):
        """The model object of engine ``name`` (loaded on first use)."""
        if name not in self.engines:
            raise DemoInputError(f"engine {name!r} is not available for this folder; available: {self.engines}")
        if name not in self._loaded:
            if name == "ONNX Runtime":
                from hf_seq.toolkit.onnx_runtime import load_onnxruntime

                self._loaded[name] = load_onnxruntime(self.exports[name], threads=1)
            else:
                import ctranslate2

                self._loaded[name] = ctranslate2.Translator(str(self.exports[name]), device="cpu", intra_threads=1)
        return self._loaded[name]

    # ---- input checks
    def encode(self, text: str, **kwargs) -> dict:
        """``text`` as a batch of one; a :class:`DemoInputError` for an empty text or one longer than the positions."""
        if not text or not text.strip():
            raise DemoInputError("Type a text first: the input is empty.")
        enc = self.tokenizer([text], return_tensors="pt", **kwargs)
        length, limit = enc["input_ids"].shape[1], self.max_length()
        if limit is not None and length > limit:
            raise DemoInputError(
                f"The text is {length} tokens long; this model reads at most {limit} (max_position_embeddings)."
            )
        return enc

    def _logits(self, engine: str, text: str, **kwargs):
        enc = self.encode(text, **kwargs)
        model = self.engine(engine)
        inputs = {k: v for k, v in enc.items() if k != "offset_mapping"}
        if engine == "PyTorch":
            with torch.no_grad():
                return enc, model(**inputs).logits[0]
        return enc, torch.as_tensor(model(**inputs).logits)[0]

    # ---- the heads
    def classify(self, text: str, engine: str = "PyTorch") -> dict[str, float]:
        """``{label: probability}`` of ``text``."""
        _, logits = self._logits(engine, text)
        probs = logits.float().softmax(-1).tolist()
        labels = self.config.id2label
        return {str(labels.get(i, i)): p for i, p in enumerate(probs)}

    def tag(self, text: str, engine: str = "PyTorch") -> list[tuple[str, str | None]]:
        """``text`` in pieces: each token with its tag, the text between tokens with ``None``."""
        fast = getattr(self.tokenizer, "is_fast", False)
        enc, logits = self._logits(engine, text, **({"return_offsets_mapping": True} if fast else {}))
        tags = logits.argmax(-1).tolist()
        ids = enc["input_ids"][0].tolist()
        special = set(self.tokenizer.all_special_ids)
        labels = self.config.id2label
        if not fast:
            return [
                (token, str(labels.get(tag, tag)))
                for token, tag, i in zip(self.tokenizer.convert_ids_to_tokens(ids), tags, ids)
                if i not in special
            ]
        pieces, end = [], 0
        for (start, stop), tag, i in zip(enc["offset_mapping"][0].tolist(), tags, ids):
            if i in special or start == stop:
                continue
            if start > end:
                pieces.append((text[end:start], None))
            pieces.append((text[start:stop], str(labels.get(tag, tag))))
            end = stop
        if end < len(text):
            pieces.append((text[end:], None))
        return pieces

    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 50,
        sampling: bool = True,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        num_samples: int = 3,
        seed: int = 0,
        engine: str = "PyTorch",
    ) -> list[str]:
        """``num_samples`` continuations of ``prompt`` (greedy: one), the prompt included; seeded."""
        enc = self.encode(prompt)
        limit = self.max_length()
        if limit is not None and enc["input_ids"].shape[1] + max_new_tokens > limit:
            raise DemoInputError(f"prompt + max new tokens exceed the model's {limit} positions.")
        if sampling and temperature <= 0:
            raise DemoInputError("The temperature must be > 0 for sampling (use greedy decoding for the limit 0).")
        options = {"do_sample": False, "num_return_sequences": 1}
        if sampling:
            options = {
                "do_sample": True,
                "temperature": float(temperature),
                "top_k": int(top_k),
                "top_p": float(top_p),
                "num_return_sequences": int(num_samples),
            }
        with self._seeded, torch.no_grad():
            torch.manual_seed(int(seed))
            out = self.engine(engine).generate(
                **enc, max_new_tokens=int(max_new_tokens), pad_token_id=self.config.pad_token_id, **options
            )
        return self.tokenizer.batch_decode(out, skip_special_tokens=True)

    def translate(self, source: str, num_beams: int = 4, engine: str = "PyTorch") -> list[tuple[str, float, list]]:
        """The ``num_beams``-best hypotheses of ``source``: ``(text, score, target ids)``, best first; the score is the
        hypothesis' log-probability divided by its length (beam search's ranking, length_penalty 1)."""
        enc = self.encode(source)
        num_beams = int(num_beams)
        if engine == "CTranslate2":
            return self._translate_ctranslate2(enc, num_beams)
        with torch.no_grad():
            out = self.engine(engine).generate(
                **enc,
                num_beams=num_beams,
                num_return_sequences=num_beams,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
            )
        sequences = torch.as_tensor(out.sequences)
        if num_beams > 1:
            scores = out.sequences_scores.tolist()
        else:  # greedy: the same normalisation as beam search's score
            steps = self.model.compute_transition_scores(sequences, out.scores, normalize_logits=True)
            length = (steps != 0).sum(-1).clamp(min=1)
            scores = (steps.sum(-1) / length).tolist()
        return [(self._text(seq.tolist()), float(s), seq.tolist()) for seq, s in zip(sequences, scores)]

    def _translate_ctranslate2(self, enc: dict, num_beams: int) -> list[tuple[str, float, list]]:
        """:meth:`translate` through CTranslate2 with the search of the model's generation config
        (``hf_seq.toolkit.export.generate_options``); the ids get the decoder start token, and the end token where the
        hypothesis ended before the length limit, as ``generate()``'s sequences have them."""
        from hf_seq.toolkit.export import generate_options

        generation = self.model.generation_config
        max_new = generation.max_new_tokens or (generation.max_length or 64) - 1
        tokens = self.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        result = self.engine("CTranslate2").translate_batch(
            [tokens],
            beam_size=num_beams,
            num_hypotheses=num_beams,
            return_scores=True,
            max_decoding_length=int(max_new),
            **generate_options(generation, num_beams),
        )[0]
        start, end = [self.config.decoder_start_token_id], [self.config.eos_token_id]
        # a hypothesis shorter than the limit ended with the end token (CTranslate2 leaves it out)
        hyps = [
            [*start, *self.tokenizer.convert_tokens_to_ids(h), *(end if len(h) < max_new else [])]
            for h in result.hypotheses
        ]
        return [(self._text(h), float(score), h) for h, score in zip(hyps, result.scores)]

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def attention_layers(self) -> int:
        """The decoder's layers with cross-attention (1 for the attention RNN)."""
        return int(getattr(self.config, "decoder_layers", 1) or 1)

    def attention_heads(self) -> int:
        return int(
            getattr(self.config, "decoder_attention_heads", None) or getattr(self.config, "num_attention_heads", 1)
        )

    def attention(self, source: str, target_ids: list[int], layer: int = -1, head: int | str = AVERAGE):
        """``(weights (T, S), source tokens, target tokens)``: the cross-attention over ``source`` of the decoder
        producing ``target_ids`` (decoder start first), up to its end token: the padding a shorter beam gets in the
        n-best has no row; ``None`` for a model without attention. A Transformer's ``head`` is one head's index or
        ``"average"``."""
        enc = self.encode(source)
        ends = self.config.eos_token_id
        ends = {ends} if isinstance(ends, int) else set(ends or ())
        target_ids = [int(i) for i in target_ids]
        end = next((i for i, token in enumerate(target_ids[1:], 1) if token in ends), len(target_ids) - 1)
        ids = torch.tensor([target_ids[: end + 1]])
        with torch.no_grad():
            out = self.model(**enc, decoder_input_ids=ids[:, :-1], output_attentions=True)
        maps = getattr(out, "cross_attentions", None)
        if not maps or maps[int(layer)] is None:
            return None
        weights = maps[int(layer)][0].float()
        if weights.dim() == 3:  # (heads, T, S)
            weights = weights.mean(0) if head == AVERAGE else weights[int(head)]
        return weights, self._labels(enc["input_ids"][0]), self._labels(ids[0, 1:])

    def _labels(self, ids) -> list[str]:
        return [self.tokenizer.decode([int(i)]).strip() or self.tokenizer.convert_ids_to_tokens(int(i)) for i in ids]

    def fill_mask(self, text: str, top_k: int = 5) -> list[tuple[str, float]]:
        """The ``top_k`` tokens for the (first) mask token in ``text`` with their probabilities."""
        mask = self.tokenizer.mask_token
        if mask is None:
            raise DemoInputError("This tokenizer has no mask token.")
        if mask not in (text or ""):
            raise DemoInputError(f"Put the mask token {mask} where a word should be filled in.")
        enc = self.encode(text)
        with torch.no_grad():
            logits = self.model(**enc).logits[0]
        position = (enc["input_ids"][0] == self.tokenizer.mask_token_id).nonzero()[0, 0]
        probs = logits[position].float().softmax(-1)
        values, ids = probs.topk(min(int(top_k), probs.numel()))
        return [(self.tokenizer.decode([int(i)]).strip(), float(p)) for p, i in zip(values, ids)]


def heatmap_figure(weights, source_tokens, target_tokens, title: str = ""):
    """A matplotlib figure of the attention weights (source tokens on x, target tokens on y)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    matrix = weights.numpy() if hasattr(weights, "numpy") else weights
    fig = Figure(figsize=(max(4.0, 0.4 * len(source_tokens) + 2), max(3.0, 0.35 * len(target_tokens) + 1.5)))
    ax = fig.add_subplot()
    image = ax.imshow(matrix, cmap="viridis", aspect="auto", vmin=0.0)
    ax.set_xticks(range(len(source_tokens)), list(source_tokens), rotation=90, fontsize=8)
    ax.set_yticks(range(len(target_tokens)), list(target_tokens), fontsize=8)
    ax.set_xlabel("source tokens")
    ax.set_ylabel("target tokens")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
    fig.tight_layout()
    return fig


def _shown(function):
    """``function`` for a Gradio event: a :class:`DemoInputError` (or any failure) becomes a ``gr.Error`` message
    on the page, never a stack trace."""
    import functools

    import gradio as gr

    @functools.wraps(function)
    def wrapped(*args):
        try:
            return function(*args)
        except gr.Error:
            raise
        except DemoInputError as error:
            raise gr.Error(str(error)) from None
        except Exception as error:  # the page shows one line; the console keeps the traceback
            import traceback

            traceback.print_exc()
            raise gr.Error(f"{type(error).__name__}: {error}") from None

    return wrapped


def build_page(demo: Demo | str | os.PathLike):
    """The ``gr.Blocks`` page of ``demo`` (a :class:`Demo` or a folder)."""
    import gradio as gr

    demo = demo if isinstance(demo, Demo) else Demo(demo)
    with gr.Blocks(title=f"hf_seq demo: {demo.title}", analytics_enabled=False) as page:
        gr.Markdown(f"## {demo.title}\n`{demo.folder}`", elem_id="served-model")
        engine = gr.Radio(demo.engines, value="PyTorch", label="engine", visible=len(demo.engines) > 1)
        engine_note = gr.Markdown(f"engine: {', '.join(demo.engines)}", elem_id="engine-note")
        engine.change(lambda e: f"engine: {e}", engine, engine_note)
        PAGES[demo.head](gr, demo, engine)
    return page


def _classifier_page(gr, demo: Demo, engine) -> None:
    text = gr.Textbox(label="text", lines=3, elem_id="input-text")
    button = gr.Button("Classify", variant="primary", elem_id="submit")
    labels = gr.Label(label="probability per label", num_top_classes=len(demo.config.id2label), elem_id="output")
    fn = _shown(lambda t, e: demo.classify(t, e))
    gr.on([button.click, text.submit], fn, [text, engine], labels, api_name="classify")


def _tagger_page(gr, demo: Demo, engine) -> None:
    text = gr.Textbox(label="sentence", lines=2, elem_id="input-text")
    button = gr.Button("Tag", variant="primary", elem_id="submit")
    tagged = gr.HighlightedText(label="tags", combine_adjacent=False, show_legend=True, elem_id="output")
    fn = _shown(lambda t, e: demo.tag(t, e))
    gr.on([button.click, text.submit], fn, [text, engine], tagged, api_name="tag")


def _lm_page(gr, demo: Demo, engine) -> None:
    prompt = gr.Textbox(label="prompt", lines=2, elem_id="input-text")
    with gr.Row():
        max_new = gr.Slider(1, 500, value=60, step=1, label="max new tokens")
        mode = gr.Radio(["sampling", "greedy"], value="sampling", label="decoding")
        samples = gr.Slider(1, MAX_SAMPLES, value=3, step=1, label="samples")
        seed = gr.Number(0, precision=0, label="seed")
    with gr.Row():
        temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="temperature")
        top_k = gr.Slider(0, 200, value=0, step=1, label="top-k (0: all)")
        top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
    button = gr.Button("Generate", variant="primary", elem_id="submit")
    with gr.Row():
        outputs = [
            gr.Textbox(label=f"sample {i + 1}", lines=6, visible=i < 3, elem_id=f"sample-{i}")
            for i in range(MAX_SAMPLES)
        ]

    def run(prompt, max_new, mode, temperature, top_k, top_p, samples, seed, engine):
        texts = demo.generate(prompt, max_new, mode == "sampling", temperature, top_k, top_p, samples, seed, engine)
        return [
            gr.update(value=texts[i], visible=True) if i < len(texts) else gr.update(visible=False)
            for i in range(MAX_SAMPLES)
        ]

    inputs = [prompt, max_new, mode, temperature, top_k, top_p, samples, seed, engine]
    gr.on([button.click, prompt.submit], _shown(run), inputs, outputs, api_name="generate")


def _translator_page(gr, demo: Demo, engine) -> None:
    source = gr.Textbox(label="source", lines=2, elem_id="input-text")
    beams = gr.Slider(1, 8, value=4, step=1, label="beams (n-best)")
    button = gr.Button("Translate", variant="primary", elem_id="submit")
    best = gr.Textbox(label="best translation", elem_id="output")
    table = gr.Dataframe(
        headers=["rank", "hypothesis", "score"],
        label="n-best (score: log-prob / length)",
        interactive=False,
        wrap=True,  # a long hypothesis wraps instead of pushing the score column out of sight
        column_widths=["8%", "77%", "15%"],
        elem_id="nbest",
    )
    state = gr.State([])
    with gr.Row():
        choice = gr.Dropdown([1], value=1, label="hypothesis")
        layers = demo.attention_layers()
        layer = gr.Dropdown(
            [(str(i + 1), i) for i in range(layers)], value=layers - 1, label="decoder layer", visible=layers > 1
        )
        heads = demo.attention_heads()
        head_choices = [(f"average of {heads}", AVERAGE), *[(str(i + 1), str(i)) for i in range(heads)]]
        head = gr.Dropdown(head_choices, value=AVERAGE, label="head", visible=heads > 1, elem_id="attention-head")
    plot = gr.Plot(label="cross-attention of the chosen hypothesis", elem_id="heatmap")

    def heat(source, hyps, choice, layer, head):
        if not hyps:
            return None
        text, _, ids = hyps[int(choice) - 1]
        found = demo.attention(source, ids, int(layer), head)
        if found is None:
            gr.Warning("This model has no attention (attention='none'): no heat map.")
            return None
        weights, src, tgt = found
        title = f"hypothesis {choice}"
        if demo.attention_layers() > 1:
            title += f", layer {int(layer) + 1} of {demo.attention_layers()}"
        if demo.attention_heads() > 1:
            title += ", heads averaged" if head == AVERAGE else f", head {int(head) + 1}"
        return heatmap_figure(weights, src, tgt, title)

    def run(source, beams, engine, layer, head):
        hyps = demo.translate(source, beams, engine)
        rows = [[i + 1, text, round(score, 4)] for i, (text, score, _) in enumerate(hyps)]
        choices = gr.update(choices=list(range(1, len(hyps) + 1)), value=1)
        return hyps[0][0], rows, hyps, choices, heat(source, hyps, 1, layer, head)

    gr.on(
        [button.click, source.submit],
        _shown(run),
        [source, beams, engine, layer, head],
        [best, table, state, choice, plot],
        api_name="translate",
    )
    for control in (choice, layer, head):
        control.input(_shown(heat), [source, state, choice, layer, head], plot, api_name=False)


def _mlm_page(gr, demo: Demo, engine) -> None:
    mask = demo.tokenizer.mask_token or "[MASK]"
    text = gr.Textbox(
        label=f"text with {mask}", lines=2, elem_id="input-text", placeholder=f"the {mask} sat on the mat"
    )
    top_k = gr.Slider(1, 20, value=5, step=1, label="top-k")
    button = gr.Button("Fill", variant="primary", elem_id="submit")
    filled = gr.Label(label=f"tokens for {mask}", elem_id="output")
    fn = _shown(lambda t, k: dict(demo.fill_mask(t, k)))
    gr.on([button.click, text.submit], fn, [text, top_k], filled, api_name="fill_mask")


PAGES = {
    "classifier": _classifier_page,
    "tagger": _tagger_page,
    "language model": _lm_page,
    "translator": _translator_page,
    "masked language model": _mlm_page,
}

# ---- the Space

SPACE_APP = '''"""Gradio Space of {name}: the hf_seq demo page, served from the model through transformers' remote code."""

import os

from hf_seq_demo import Demo, build_page

MODEL = os.environ.get("HF_SEQ_DEMO_MODEL", {model!r})

if __name__ == "__main__":
    build_page(Demo(MODEL, exports={{}})).launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"))
'''

SPACE_README = """---
title: {title}
emoji: 🔤
colorFrom: indigo
colorTo: green
sdk: gradio
sdk_version: {gradio_version}
app_file: app.py
pinned: false
{models}---

# {title}

The demo page of the {head} `{name}` ({architecture}). The model loads with `trust_remote_code=True`: its folder
carries the modelling code, so the Space needs transformers, torch and Gradio only.
"""


def write_space(folder: str | os.PathLike, space_dir: str | os.PathLike, model_id: str | None = None) -> Path:
    """Write a Gradio Space serving ``folder``'s page into ``space_dir``; returns it.

    ``model_id``: the Hub repository the Space loads the model from; None copies the folder into
    ``space_dir/model`` (a Space that holds its model)."""
    import gradio
    import transformers

    folder, space = Path(folder), Path(space_dir)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    head = head_of(config)
    space.mkdir(parents=True, exist_ok=True)
    if model_id is None:
        target = space / "model"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(folder, target, ignore=shutil.ignore_patterns("checkpoint-*", "runs", ".*"))
        model = "model"
    else:
        model = model_id
    shutil.copyfile(__file__, space / "hf_seq_demo.py")
    name = folder.resolve().name
    (space / "app.py").write_text(SPACE_APP.format(name=name, model=model), encoding="utf-8")
    major = int(torch.__version__.split(".")[0])
    requirements = [
        f"transformers>={transformers.__version__.split('+')[0]},<{int(transformers.__version__.split('.')[0]) + 1}",
        f"torch>={torch.__version__.split('+')[0]},<{major + 1}",
        f"gradio>={gradio.__version__},<{int(gradio.__version__.split('.')[0]) + 1}",
        "matplotlib>=3.7",
    ]
    (space / "requirements.txt").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    title = f"{name} {head}"
    readme = SPACE_README.format(
        title=title,
        gradio_version=gradio.__version__,
        models=f"models:\n  - {model_id}\n" if model_id else "",
        head=head,
        name=name,
        architecture=(config.architectures or ["?"])[0],
    )
    (space / "README.md").write_text(readme, encoding="utf-8")
    return space


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-seq-demo",
        description="Open a Gradio page for a trained hf_seq model folder (the page follows the folder's head), or "
        "write a Hugging Face Space that serves it.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="A saved model folder (model, config, tokenizer).")
    parser.add_argument(
        "--write-space",
        metavar="DIR",
        help="Write a Gradio Space (app.py, requirements.txt, README.md) into DIR instead of opening the page.",
    )
    parser.add_argument(
        "--model-id",
        metavar="REPO",
        help="With --write-space: the Hub repository the Space loads "
        "the model from (default: a copy of RUN_DIR inside the Space).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="Address to serve on (default 127.0.0.1).")
    parser.add_argument("--port", type=int, default=None, help="Port (default: Gradio's, 7860 or the next free).")
    parser.add_argument("--share", action="store_true", help="Ask Gradio for a public link.")
    return parser


def main(argv: list[str] | None = None) -> None:
    """``hf-seq-demo``: a folder that is not a model, or a head without a page, exits 2 with one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    folder = Path(args.run_dir)
    if not (folder / "config.json").is_file():
        parser.error(f"RUN_DIR {folder} has no config.json: not a saved model folder")
    import hf_seq  # noqa: F401  (the installed classes serve the folder: no remote code runs)

    try:
        if args.write_space:
            space = write_space(folder, args.write_space, args.model_id)
            print(f"[hf_seq] wrote the Space into {space}: app.py, requirements.txt, README.md, hf_seq_demo.py")
            return
        demo = Demo(folder)
    except ValueError as error:
        parser.error(str(error))
    print(f"[hf_seq] serving {demo.title} on {', '.join(demo.engines)}", file=sys.stderr)
    build_page(demo).launch(server_name=args.host, server_port=args.port, share=args.share)


__all__ = ["Demo", "DemoInputError", "build_page", "find_exports", "head_of", "heatmap_figure", "main", "write_space"]

if __name__ == "__main__":
    main()
