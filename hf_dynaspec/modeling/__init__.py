"""The artifact: what an assistant *is* and how it is stored.

Configuration (`DynaSpecConfig`, architecture only), the drafter modules (`EagleDrafter`, `Eagle3Drafter`), Medusa
heads (`MedusaAssistant`, `MedusaConfig`, with the published Medusa layouts' readers), the
shortlist components saved with it (clusters, router, frequency lists), the default drafting options saved
beside it (`DynaSpecGenerationConfig`, generation_config.json), and save / load / push / checkpoint formats.
Imports nothing of the runtime (drafting, generation, kernels): an artifact can be built, trained, saved and
loaded without them.
"""
