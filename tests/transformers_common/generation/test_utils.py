"""``GenerationTesterMixin``; NOT part of the transformers 5.25.0 source distribution (see ../PROVENANCE.md).

transformers' ``tests/generation/test_utils.py`` is not shipped in the sdist, but ``test_modeling_common.py`` imports
``GenerationTesterMixin`` from here and requires every tester of a model that can ``generate`` to inherit it
(``test_generation_tester_mixin_inheritance``). This mixin is written for hf_seq with the same protocol (a
``model_tester`` with ``prepare_config_and_inputs_for_common``; ``all_generative_model_classes``) and checks each
decoding strategy of ``GenerationMixin.generate`` against an independent reference computed here from the model's
own forward WITHOUT a cache: greedy tokens against the argmax of uncached forwards, beam scores against the summed
log-probabilities of the returned sequences, cached against uncached decoding, continuing from a returned cache, left
padding, ``inputs_embeds`` prompts, and assisted / prompt-lookup decoding (transformers' clear error for stateful
models).
"""

from __future__ import annotations

import inspect

import torch
from transformers.generation import GenerateDecoderOnlyOutput, GenerateEncoderDecoderOutput
from transformers.testing_utils import torch_device


class GenerationTesterMixin:
    model_tester = None
    max_new_tokens = 3
    generate_batch_size = 2

    # ------------------------------------------------------------------------------------------------ helpers
    def _get_generation_inputs(self, batch_size: int | None = None):
        """(config, prompt inputs): the first ``batch_size`` rows of the common inputs, without labels."""
        batch_size = batch_size or self.generate_batch_size
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        keep = ("input_ids", "attention_mask", "token_type_ids")
        prompt = {k: v[:batch_size].to(torch_device) for k, v in inputs.items() if k in keep}
        return config, prompt

    def _model(self, model_class, config):
        torch.manual_seed(0)
        return model_class(config).to(torch_device).eval()

    def _exact_length_kwargs(self, n: int) -> dict:
        """Generate exactly ``n`` new tokens (EOS suppressed until then) so that outputs can be compared."""
        return {"max_new_tokens": n, "min_new_tokens": n}

    def _eos_ids(self, model) -> list[int]:
        eos = model.generation_config.eos_token_id
        if eos is None:
            return []
        return [eos] if isinstance(eos, int) else list(eos)

    def _start_ids(self, model, batch_size: int) -> torch.Tensor:
        start = model.generation_config.decoder_start_token_id
        if start is None:
            start = model.config.decoder_start_token_id
        return torch.full((batch_size, 1), start, dtype=torch.long, device=torch_device)

    @torch.no_grad()
    def _next_token_log_probs(self, model, prompt: dict, generated: torch.Tensor) -> torch.Tensor:
        """log p(next | prompt, generated) from one forward over everything, no cache; EOS masked as min_new_tokens does.

        ``generated``: (B, t) tokens so far (for an encoder-decoder: the decoder tokens, start token first; for a
        decoder-only model: the prompt followed by the new tokens). Returns (B, V).
        """
        if model.config.is_encoder_decoder:
            out = model(**prompt, decoder_input_ids=generated, use_cache=False)
        else:
            new = generated.shape[1] - prompt["input_ids"].shape[1]
            mask = prompt.get("attention_mask")
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones(mask.shape[0], new)], dim=1)
            kwargs = {k: v for k, v in prompt.items() if k not in ("input_ids", "attention_mask")}
            out = model(input_ids=generated, attention_mask=mask, use_cache=False, **kwargs)
        log_probs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)  # (B, V)
        for eos in self._eos_ids(model):
            log_probs[:, eos] = -float("inf")  # after the softmax, as beam search applies its logits processors
        return log_probs

    def _assert_greedy(self, model, prompt: dict, sequences: torch.Tensor, n: int, atol: float = 1e-5) -> None:
        """Each of the last ``n`` tokens of ``sequences`` is the argmax of an uncached forward over its prefix.

        A tie within ``atol`` (tiny random models have nearly flat logits; cached and uncached forwards round
        differently) counts as an argmax; any other token fails.
        """
        for step in range(n):
            upto = sequences.shape[1] - n + step
            log_probs = self._next_token_log_probs(model, prompt, sequences[:, :upto])
            chosen = log_probs.gather(1, sequences[:, upto : upto + 1]).squeeze(1)
            best = log_probs.max(-1).values
            self.assertTrue(
                bool((chosen >= best - atol).all()),
                msg=f"step {step}: generated {sequences[:, upto].tolist()}, argmax {log_probs.argmax(-1).tolist()}, "
                f"log-prob shortfall {(best - chosen).tolist()}",
            )

    def _sequence_log_prob(self, model, prompt: dict, sequences: torch.Tensor, n: int) -> torch.Tensor:
        """Sum of the log-probabilities of the last ``n`` tokens of each row of ``sequences`` (uncached forwards)."""
        total = torch.zeros(sequences.shape[0], device=sequences.device)
        for step in range(n):
            upto = sequences.shape[1] - n + step
            log_probs = self._next_token_log_probs(model, prompt, sequences[:, :upto])
            total += log_probs.gather(1, sequences[:, upto : upto + 1]).squeeze(1)
        return total

    @staticmethod
    def _repeat_rows(prompt: dict, repeats: int) -> dict:
        return {k: v.repeat_interleave(repeats, dim=0) for k, v in prompt.items()}

    # -------------------------------------------------------------------------------------------------- tests
    def test_greedy_generate(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                n = self.max_new_tokens
                out = model.generate(**prompt, do_sample=False, **self._exact_length_kwargs(n))
                self.assertEqual(out.shape[1], (1 if config.is_encoder_decoder else prompt["input_ids"].shape[1]) + n)
                self._assert_greedy(model, prompt, out, n)

    def test_greedy_generate_dict_outputs(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                n = self.max_new_tokens
                out = model.generate(
                    **prompt,
                    do_sample=False,
                    return_dict_in_generate=True,
                    output_scores=True,
                    output_logits=True,
                    output_hidden_states=True,
                    output_attentions=self.has_attentions,
                    **self._exact_length_kwargs(n),
                )
                batch_size = prompt["input_ids"].shape[0]
                vocab_size = config.get_text_config(decoder=True).vocab_size
                expected_type = GenerateEncoderDecoderOutput if config.is_encoder_decoder else GenerateDecoderOnlyOutput
                self.assertIsInstance(out, expected_type)
                self.assertEqual(len(out.scores), n)
                self.assertEqual(len(out.logits), n)
                for scores in (*out.scores, *out.logits):
                    self.assertEqual(tuple(scores.shape), (batch_size, vocab_size))
                # scores are the processed logits of the chosen tokens: greedy picks their argmax
                new_tokens = out.sequences[:, -n:]
                self.assertEqual(torch.stack([s.argmax(-1) for s in out.scores], 1).tolist(), new_tokens.tolist())
                num_states = config.get_text_config(decoder=True).num_hidden_layers + 1  # embeddings + each layer
                steps = out.decoder_hidden_states if config.is_encoder_decoder else out.hidden_states
                self.assertEqual(len(steps), n)
                for step in steps:
                    self.assertEqual(len(step), num_states)
                    self.assertTrue(all(h.shape[0] == batch_size for h in step))
                if config.is_encoder_decoder:
                    self.assertIsNotNone(out.encoder_hidden_states)
                if self.has_attentions:
                    attentions = out.decoder_attentions if config.is_encoder_decoder else out.attentions
                    self.assertEqual(len(attentions), n)
                    if config.is_encoder_decoder:
                        self.assertIsNotNone(out.encoder_attentions)
                        self.assertEqual(len(out.cross_attentions), n)

    def test_greedy_generate_dict_outputs_use_cache(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                kwargs = dict(do_sample=False, return_dict_in_generate=True, output_scores=True)
                cached = model.generate(**prompt, use_cache=True, **kwargs, **self._exact_length_kwargs(3))
                uncached = model.generate(**prompt, use_cache=False, **kwargs, **self._exact_length_kwargs(3))
                self.assertIsNotNone(cached.cache)
                for out in (cached, uncached):
                    self._assert_greedy(model, prompt, out.sequences, 3)
                # the scores agree for as long as the two decodings chose the same tokens (a near-tie may split them)
                same = (cached.sequences == uncached.sequences).all(dim=0)
                for step, (a, b) in enumerate(zip(cached.scores, uncached.scores)):
                    if not bool(same[: cached.sequences.shape[1] - 3 + step].all()):
                        break
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)

    def test_sample_generate(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                kwargs = dict(do_sample=True, num_return_sequences=2, top_k=0, **self._exact_length_kwargs(3))
                torch.manual_seed(1)
                first = model.generate(**prompt, **kwargs)
                torch.manual_seed(1)
                second = model.generate(**prompt, **kwargs)
                batch_size = prompt["input_ids"].shape[0]
                self.assertEqual(first.shape[0], 2 * batch_size)
                self.assertEqual(first.tolist(), second.tolist())
                # top_k=1 sampling has one candidate per step: it is greedy decoding
                top1 = model.generate(**prompt, do_sample=True, top_k=1, **self._exact_length_kwargs(3))
                greedy = model.generate(**prompt, do_sample=False, **self._exact_length_kwargs(3))
                self.assertEqual(top1.tolist(), greedy.tolist())

    def test_beam_search_generate(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                n = self.max_new_tokens
                out = model.generate(
                    **prompt,
                    do_sample=False,
                    num_beams=3,
                    num_return_sequences=2,
                    length_penalty=0.0,
                    return_dict_in_generate=True,
                    output_scores=True,
                    **self._exact_length_kwargs(n),
                )
                batch_size = prompt["input_ids"].shape[0]
                self.assertEqual(out.sequences.shape[0], 2 * batch_size)
                # with length_penalty=0 a hypothesis' score is the sum of its tokens' log-probabilities: recompute
                # them without a cache (catches a cache that beam search does not reorder)
                expected = self._sequence_log_prob(model, self._repeat_rows(prompt, 2), out.sequences, n)
                torch.testing.assert_close(out.sequences_scores, expected, rtol=0, atol=5e-5)
                # the returned hypotheses of a row are sorted best first
                scores = out.sequences_scores.view(batch_size, 2)
                self.assertTrue(bool((scores[:, 0] >= scores[:, 1]).all()))
                # one beam is greedy search
                one_beam = model.generate(**prompt, do_sample=False, num_beams=1, **self._exact_length_kwargs(n))
                self._assert_greedy(model, prompt, one_beam, n)

    def test_beam_sample_generate(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                kwargs = dict(do_sample=True, num_beams=2, top_k=0, **self._exact_length_kwargs(3))
                torch.manual_seed(2)
                first = model.generate(**prompt, **kwargs)
                torch.manual_seed(2)
                second = model.generate(**prompt, **kwargs)
                self.assertEqual(first.shape[0], prompt["input_ids"].shape[0])
                self.assertEqual(first.tolist(), second.tolist())

    def test_generate_continue_from_cache(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                whole = model.generate(**prompt, do_sample=False, **self._exact_length_kwargs(4))
                first = model.generate(
                    **prompt, do_sample=False, return_dict_in_generate=True, **self._exact_length_kwargs(2)
                )
                self.assertIsNotNone(first.cache)
                if config.is_encoder_decoder:
                    # the whole decoder prefix: generate() puts the start token back in front of a shorter one, so
                    # the model reads only the tokens its cache has not (generate slices them for key/value caches)
                    rest = model.generate(
                        **prompt,
                        decoder_input_ids=first.sequences,
                        cache=first.cache,
                        do_sample=False,
                        **self._exact_length_kwargs(2),
                    )
                else:
                    mask = prompt.get("attention_mask")
                    mask = torch.cat([mask, mask.new_ones(mask.shape[0], 2)], dim=1) if mask is not None else None
                    extra = {k: v for k, v in prompt.items() if k not in ("input_ids", "attention_mask")}
                    ids = first.sequences
                    if all(getattr(first.cache, "is_linear", [False])):
                        # generate() slices the prompt only for key/value caches: a recurrent state (Mamba's too) is
                        # continued by passing just the tokens it has not read, with the whole attention mask
                        ids = ids[:, first.cache.get_seq_length() :]
                    rest = model.generate(
                        input_ids=ids,
                        attention_mask=mask,
                        cache=first.cache,
                        do_sample=False,
                        **extra,
                        **self._exact_length_kwargs(2),
                    )
                self.assertEqual(whole[:, : first.sequences.shape[1]].tolist(), first.sequences.tolist())
                # the two tokens decoded from the returned cache are what an uncached forward over everything picks
                # (compared to `whole` up to near-ties: the two runs read the tokens in different chunks)
                continued = torch.cat([first.sequences, rest[:, -2:]], dim=1)
                self._assert_greedy(model, prompt, continued, 2)

    def test_left_padding_compatibility(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                if config.is_encoder_decoder:
                    continue  # a decoder-only contract: encoder-decoders start every row from one decoder token
                model = self._model(model_class, config)
                ids = prompt["input_ids"]
                mask = torch.ones_like(ids)
                with torch.no_grad():
                    plain = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, -1]
                    pad = torch.full((ids.shape[0], 3), config.pad_token_id, dtype=ids.dtype, device=ids.device)
                    padded_ids = torch.cat([pad, ids], dim=1)
                    padded_mask = torch.cat([torch.zeros_like(pad), mask], dim=1)
                    padded = model(input_ids=padded_ids, attention_mask=padded_mask, use_cache=False).logits[:, -1]
                torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-5)
                padded_gen = model.generate(
                    input_ids=padded_ids, attention_mask=padded_mask, do_sample=False, **self._exact_length_kwargs(3)
                )
                # the tokens generated from the padded prompt are the greedy continuation of the unpadded one
                unpadded = {"input_ids": ids, "attention_mask": mask}
                self._assert_greedy(model, unpadded, torch.cat([ids, padded_gen[:, -3:]], dim=1), 3)

    def test_generate_from_inputs_embeds(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                config, prompt = self._get_generation_inputs()
                model = self._model(model_class, config)
                if "inputs_embeds" not in inspect.signature(model.forward).parameters:
                    self.skipTest(f"{model_class.__name__}.forward takes no inputs_embeds")
                embeds = model.get_input_embeddings()(prompt["input_ids"])
                from_ids = model.generate(**prompt, do_sample=False, **self._exact_length_kwargs(3))
                rest = {k: v for k, v in prompt.items() if k != "input_ids"}
                from_embeds = model.generate(
                    inputs_embeds=embeds, **rest, do_sample=False, **self._exact_length_kwargs(3)
                )
                # decoder-only: generate returns only the new tokens for an inputs_embeds prompt
                expected = from_ids if config.is_encoder_decoder else from_ids[:, prompt["input_ids"].shape[1] :]
                self.assertEqual(from_embeds.tolist(), expected.tolist())

    def _assisted_or_error(self, model_class, **assist):
        config, prompt = self._get_generation_inputs(batch_size=1)
        model = self._model(model_class, config)
        if assist.pop("assistant_is_self", False):
            assist["assistant_model"] = model
        if getattr(model, "_is_stateful", False):  # PreTrainedModel's default (False) up to 5.24; gone in 5.25
            # a recurrent state cannot be rolled back: transformers' stateful-model error (hf_seq raises it on 5.25)
            with self.assertRaisesRegex(ValueError, "not supported with stateful models"):
                model.generate(**prompt, do_sample=False, **assist, **self._exact_length_kwargs(4))
            return
        greedy = model.generate(**prompt, do_sample=False, **self._exact_length_kwargs(4))
        assisted = model.generate(**prompt, do_sample=False, **assist, **self._exact_length_kwargs(4))
        self.assertEqual(assisted.tolist(), greedy.tolist())

    def test_assisted_decoding_matches_greedy_search(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                self._assisted_or_error(model_class, assistant_is_self=True)

    def test_prompt_lookup_decoding_matches_greedy_search(self):
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                self._assisted_or_error(model_class, prompt_lookup_num_tokens=2)
