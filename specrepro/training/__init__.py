"""Training on the frozen target: one trainer loop (``loop``), the distillation losses (``losses``) and data
(``data``), and the trainers that hand their losses to the loop: the draft (``draft``), Medusa heads (``medusa``),
PPD prompt tokens (``ppd``) and their ablations, the DistillSpec study (``distillspec``) and the online updates
(``online``, ``online_stream``)."""
