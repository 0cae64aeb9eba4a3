# expect: overflow from check_online_softmax(wrong)
def wrong(tiles):
    total = acc = 0
    for scores, values in tiles:
        weights = torch.exp(scores.float())
        total, acc = total + weights.sum(), acc + weights @ values.float()
    return acc / total, torch.log(total)
