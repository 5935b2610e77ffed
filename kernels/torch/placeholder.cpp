// placeholder until the kernel op lands
#include <torch/torch.h>
