"""``pipeline("translation")`` and ``pipeline("text2text-generation")`` for hf_seq encoder-decoder models.

transformers 5 removed these two tasks from its built-in pipelines (``pipeline("translation")`` raises
``KeyError: The task translation has been removed``). The Hub's custom-pipeline mechanism still dispatches them:
a model whose ``config.custom_pipelines`` names a pipeline class that ships in the model folder is served by that
class. hf_seq seq2seq models put :data:`SEQ2SEQ_CUSTOM_PIPELINES` into their config and, because their modelling
file imports this module relatively, ``save_pretrained`` copies this file next to the weights. Then::

    translator = pipeline("translation", model="runs/translation_rnn_additive", trust_remote_code=True)
    translator("In the beginning God created the heaven and the earth.", num_beams=5)
    # [{'translation_text': '...'}]

With hf_seq imported the flag is not needed: ``import hf_seq`` calls :func:`register_pipelines`, which registers these
classes with transformers' public ``PIPELINE_REGISTRY``, and the folder's config then leaves the tasks to the
registry (hf_seq/pipeline_tasks.py), so the installed classes serve them and no remote code runs.

For a model object in memory build the class directly: ``TranslationPipeline(model=model, tokenizer=tok)``. The classes follow transformers 4's
``Text2TextGenerationPipeline`` / ``TranslationPipeline`` (same outputs: ``generated_text`` / ``translation_text``).
"""

from __future__ import annotations

from typing import Any

from transformers.pipelines.base import Pipeline

__all__ = ["SEQ2SEQ_CUSTOM_PIPELINES", "Text2TextGenerationPipeline", "TranslationPipeline", "register_pipelines"]

SEQ2SEQ_CUSTOM_PIPELINES = {
    "translation": {
        "impl": "seq2seq_pipelines.TranslationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    },
    "text2text-generation": {
        "impl": "seq2seq_pipelines.Text2TextGenerationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    },
}


class Text2TextGenerationPipeline(Pipeline):
    """Text in, generated text out, through ``model.generate()`` of an encoder-decoder model."""

    return_name = "generated"
    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        model_type = getattr(self.model.config, "model_type", None)
        if self.task and not str(model_type).startswith("hf_seq_"):  # pipeline(task) through the registry
            raise ValueError(
                f"pipeline({self.task!r}) with hf_seq imported serves hf_seq encoder-decoder models "
                f"(hf_seq_rnn_seq2seq, hf_seq_transformer), and this model's type is {model_type!r}: transformers "
                "5 removed the task for other models"
            )

    def _sanitize_parameters(
        self,
        return_tensors: bool | None = None,
        return_text: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        truncation: bool | None = None,
        max_source_length: int | None = None,
        **generate_kwargs,
    ) -> tuple[dict, dict, dict]:
        preprocess_params: dict[str, Any] = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        if max_source_length is not None:
            preprocess_params["max_length"] = max_source_length
        postprocess_params: dict[str, Any] = {}
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if return_text is not None:
            postprocess_params["return_text"] = return_text
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, inputs: str | list[str], **kwargs):
        """Generate for one text (→ list of dicts) or a list of texts (→ one list per text, or one dict each)."""
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(isinstance(r, list) and len(r) == 1 for r in result):
            return [r[0] for r in result]
        return result

    def preprocess(self, inputs: str, truncation: bool = False, max_length: int | None = None) -> dict:
        if not isinstance(inputs, str):
            raise ValueError(f"`inputs` must be a string or a list of strings, got {type(inputs)}")
        return self.tokenizer(inputs, truncation=truncation, max_length=max_length, return_tensors="pt")

    def _forward(self, model_inputs: dict, **generate_kwargs) -> dict:
        prepare = getattr(self, "_prepare_generate_kwargs", None)  # the pipeline's defaults; 5.0 has none: the model's
        if prepare is not None:
            generate_kwargs = prepare(generate_kwargs)
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)  # (B * num_return_sequences, T)
        in_batch = model_inputs["input_ids"].shape[0]
        return {"output_ids": output_ids.reshape(in_batch, -1, output_ids.shape[-1])}

    def postprocess(
        self,
        model_outputs: dict,
        return_tensors: bool = False,
        return_text: bool = True,
        clean_up_tokenization_spaces: bool = False,
    ) -> list[dict]:
        records = []
        for output_ids in model_outputs["output_ids"][0]:
            record = {}
            if return_tensors:
                record[f"{self.return_name}_token_ids"] = output_ids
            if return_text or not return_tensors:
                record[f"{self.return_name}_text"] = self.tokenizer.decode(
                    output_ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                ).strip()
            records.append(record)
        return records


class TranslationPipeline(Text2TextGenerationPipeline):
    """Translate text; outputs ``{"translation_text": ...}`` like transformers 4's translation pipeline."""

    return_name = "translation"

    def _sanitize_parameters(self, src_lang: str | None = None, tgt_lang: str | None = None, **kwargs):
        # one model = one language pair here; the language arguments are accepted for API compatibility
        return super()._sanitize_parameters(**kwargs)


def register_pipelines() -> None:
    """Register every task of :data:`SEQ2SEQ_CUSTOM_PIPELINES` with transformers' ``PIPELINE_REGISTRY`` (called by
    ``import hf_seq``): ``pipeline("translation", model=folder)`` then needs no ``trust_remote_code``.

    transformers 5 removed both tasks; from 5.x releases that answer them with "has been removed" (``REMOVED_TASKS``
    in ``transformers.pipelines``, read before the registry) the registered tasks are taken out of that list. The
    registry marks a class with ``_registered_impl``, from which ``Pipeline.save_pretrained`` would rewrite the
    config's ``custom_pipelines`` to that one task: the mark is dropped, the folder keeps its declaration."""
    import transformers.pipelines as pipelines
    from transformers import AutoModelForSeq2SeqLM

    classes = {"Text2TextGenerationPipeline": Text2TextGenerationPipeline, "TranslationPipeline": TranslationPipeline}
    for task, spec in SEQ2SEQ_CUSTOM_PIPELINES.items():
        pipeline_class = classes[spec["impl"].rsplit(".", 1)[1]]
        if pipelines.PIPELINE_REGISTRY.supported_tasks.get(task, {}).get("impl") is not pipeline_class:
            pipelines.PIPELINE_REGISTRY.register_pipeline(
                task, pipeline_class=pipeline_class, pt_model=AutoModelForSeq2SeqLM, type=spec["type"]
            )
        removed = getattr(pipelines, "REMOVED_TASKS", None)
        if isinstance(removed, dict):
            removed.pop(task, None)
        entry = pipelines.PIPELINE_REGISTRY.supported_tasks[task]
        if not isinstance(entry, _TaskWithoutDefault):  # pipeline(task) alone: a message, not KeyError('default')
            pipelines.PIPELINE_REGISTRY.supported_tasks[task] = _TaskWithoutDefault(task, entry)
    for pipeline_class in classes.values():
        if "_registered_impl" in vars(pipeline_class):
            delattr(pipeline_class, "_registered_impl")


class _TaskWithoutDefault(dict):
    """A registry entry without a default model: ``pipeline(task)`` without ``model=`` reads its ``"default"`` and
    gets a ``KeyError`` that says what to pass."""

    def __init__(self, task: str, entry: dict):
        super().__init__(entry)
        self.task = task

    def __missing__(self, key):
        if key == "default":
            raise KeyError(
                f"pipeline({self.task!r}) has no default model: transformers 5 removed the task, and hf_seq serves "
                "it for hf_seq encoder-decoder models: pass model=<a saved hf_seq folder>"
            )
        raise KeyError(key)
