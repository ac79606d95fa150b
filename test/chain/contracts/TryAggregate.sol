// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// The one Multicall3 entry point the x402 EVM facilitator uses (tryAggregate), placed at the
/// canonical Multicall3 address on local chains, which anvil does not ship.
contract TryAggregate {
    struct Call {
        address target;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function tryAggregate(bool requireSuccess, Call[] calldata calls)
        external
        payable
        returns (Result[] memory returnData)
    {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool success, bytes memory ret) = calls[i].target.call(calls[i].callData);
            if (requireSuccess) require(success, "Multicall3: call failed");
            returnData[i] = Result(success, ret);
        }
    }
}
