"""The pick-and-lift reverse-curriculum stages (paper App. A; the table: docs/env.md,
"Reverse curriculum"). The curriculum itself is generic: :class:`rmtl.env.curriculum.ReverseCurriculum`
takes a task's stages."""

from __future__ import annotations

from rmtl.env.curriculum import CurriculumStage

PAPER_STAGES: tuple[CurriculumStage, ...] = (
    CurriculumStage(0.0, 0.0, 0.08, 0.5, 50),
    CurriculumStage(0.15, 0.08, 0.25, 0.5, 80),
    CurriculumStage(0.4, 0.25, 0.5, 0.45, 120),
    CurriculumStage(0.65, 0.5, 0.75, 0.4, 150),
    CurriculumStage(1.0, 0.75, 1.0, None, 0),
)
"""The five stages of the paper's Appendix A."""
