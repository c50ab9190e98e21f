"""tests/fixtures/flux-pipeline-cases/: whole FluxPipeline calls FROM TEXT on the bundled tiny pipelines
(tests/fixtures/tiny-flux and tiny-flux-schnell, loaded with dtype=float32), covering what the per-step
fixture in tiny-flux/reference/generate.safetensors does not: a batch of prompts, num_images_per_prompt,
negative prompts with true CFG, prompt_2, negative_prompt_2, custom sigmas, non-square sizes, seeds
other than 0.

`cases.safetensors` holds, per case `<name>`: `<name>.latents` (the packed latents after the last step,
caught with callback_on_step_end) and `<name>.image_u8` (round(image * 255) of output_type "np").
`cases.json` holds the call parameters of each case (exactly the pipeline's keyword arguments).

Run: tools/reference/regenerate_fixtures.sh pipeline_cases  (needs tests/fixtures/tiny-flux first).
"""
from __future__ import annotations

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CASES = {
    # dev-style: 2 prompts x 2 images, per-prompt negatives, true CFG, non-square, 3 steps.
    "dev_batch_cfg": dict(folder="tiny-flux", prompt=["A cat", "a dog in the rain, 35mm"],
                          negative_prompt=["blurry", "low quality, jpeg artifacts"], true_cfg_scale=1.5,
                          num_images_per_prompt=2, height=24, width=40, num_inference_steps=3,
                          guidance_scale=2.5, seed=7, max_sequence_length=32),
    # schnell-style: separate T5 prompt, no guidance embedding, short T5 sequence.
    "schnell_prompt2": dict(folder="tiny-flux-schnell", prompt=["a red fox"], prompt_2=["a fox, red, in snow"],
                            height=32, width=32, num_inference_steps=2, guidance_scale=0.0, seed=123,
                            max_sequence_length=16),
    # dev-style, one prompt, more steps, tall image, a large seed.
    "dev_tall": dict(folder="tiny-flux", prompt=["Portrait of an old sailor, oil painting"], height=48, width=16,
                     num_inference_steps=4, guidance_scale=4.0, seed=2**40 + 3, max_sequence_length=64),
    # custom sigmas (they set the step count: num_inference_steps is ignored), shifted by mu like the
    # default schedule; a separate T5 negative prompt with true CFG.
    "dev_custom_sigmas": dict(folder="tiny-flux", prompt=["a lighthouse at dusk"], sigmas=[1.0, 0.8, 0.55, 0.3, 0.1],
                              negative_prompt=["ugly"], negative_prompt_2=["ugly, blurry, washed-out colours"],
                              true_cfg_scale=2.0, height=32, width=48, num_inference_steps=2, guidance_scale=3.0,
                              seed=99, max_sequence_length=24),
}


def main() -> None:
    deterministic(0)
    import numpy as np
    import torch
    from diffusers import FluxPipeline

    out_dir = fresh_dir(FIXTURES / "flux-pipeline-cases")
    tensors = {}
    pipes = {}
    for name, case in CASES.items():
        folder = case["folder"]
        if folder not in pipes:
            pipes[folder] = FluxPipeline.from_pretrained(FIXTURES / folder, dtype=torch.float32)
            pipes[folder].set_progress_bar_config(disable=True)
        pipe = pipes[folder]
        kwargs = {k: v for k, v in case.items() if k not in ("folder", "seed")}
        final = {}

        def catch(p, i, t, cb_kwargs):
            final["latents"] = cb_kwargs["latents"].clone()
            return {}

        image = pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="np",
                     callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"]).images
        tensors[f"{name}.latents"] = final["latents"]
        tensors[f"{name}.image_u8"] = torch.from_numpy(np.round(image * 255).astype(np.uint8))
    save_tensors(out_dir / "cases.safetensors", tensors)
    write_json(out_dir / "cases.json", CASES)
    print(f"flux-pipeline-cases: {dir_size(out_dir)} bytes")


if __name__ == "__main__":
    main()
