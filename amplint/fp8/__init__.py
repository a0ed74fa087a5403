"""fp8 training readiness: the plan of which ``nn.Linear`` layers torchao's
``convert_to_float8_training`` should convert (:mod:`.plan`), the fp8 setups a project
shows (:mod:`.setup`), and ``amplint verify --target fp8`` (:mod:`.verify`).

:mod:`.gemm` holds the measured break-even the plan and AMP703 share.  Only
:mod:`.plan`'s model walk and :mod:`.verify` import torch (and torchao) when called.
"""
